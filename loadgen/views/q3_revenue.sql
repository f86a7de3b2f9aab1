-- TPC-H Q3 itself: the revenue of each unshipped order of a BUILDING customer (an aggregate view,
-- fedmodel.aggregate_view; the algorithms maintain its join, the q3 view with the keys it needs).
SELECT lineitem.l_orderkey,
       SUM(lineitem.l_extendedprice * (1 - lineitem.l_discount)) AS revenue,
       orders.o_orderdate, orders.o_shippriority
FROM customer
JOIN orders ON customer.c_custkey = orders.o_custkey
JOIN lineitem ON lineitem.l_orderkey = orders.o_orderkey
WHERE customer.c_mktsegment = 'BUILDING'
  AND orders.o_orderdate < '1995-03-15'
  AND lineitem.l_shipdate > '1995-03-15'
GROUP BY lineitem.l_orderkey, orders.o_orderdate, orders.o_shippriority
