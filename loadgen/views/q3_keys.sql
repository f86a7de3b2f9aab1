-- q3 with the keys of all three relations in its select list, so the view needs no count.
SELECT customer.c_custkey, lineitem.l_orderkey, lineitem.l_linenumber, orders.o_orderdate,
       orders.o_shippriority, lineitem.l_extendedprice, lineitem.l_discount
FROM customer
JOIN orders ON customer.c_custkey = orders.o_custkey
JOIN lineitem ON lineitem.l_orderkey = orders.o_orderkey
WHERE customer.c_mktsegment = 'BUILDING'
  AND orders.o_orderdate < '1995-03-15'
  AND lineitem.l_shipdate > '1995-03-15'
