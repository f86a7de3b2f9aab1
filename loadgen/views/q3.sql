-- TPC-H Q3 without its aggregate: unshipped orders of BUILDING customers. The select list lacks
-- c_custkey and l_linenumber, so the view carries a count column.
SELECT lineitem.l_orderkey, orders.o_orderdate, orders.o_shippriority,
       lineitem.l_extendedprice, lineitem.l_discount
FROM customer
JOIN orders ON customer.c_custkey = orders.o_custkey
JOIN lineitem ON lineitem.l_orderkey = orders.o_orderkey
WHERE customer.c_mktsegment = 'BUILDING'
  AND orders.o_orderdate < '1995-03-15'
  AND lineitem.l_shipdate > '1995-03-15'
