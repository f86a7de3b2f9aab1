-- The demo's view: urgent orders of German customers with their line items, over the "sales"
-- and "reference" sources in the default placement. Nation's key is not selected, so the view
-- carries a count column.
SELECT c.c_custkey, c.c_name, n.n_name, o.o_orderkey, o.o_orderdate, l.l_linenumber, l.l_quantity
FROM customer c
JOIN nation n ON c.c_nationkey = n.n_nationkey
JOIN orders o ON o.o_custkey = c.c_custkey
JOIN lineitem l ON l.l_orderkey = o.o_orderkey
WHERE n.n_name = 'GERMANY'
  AND o.o_orderpriority = '1-URGENT'
