-- TPC-H Q5 itself: the revenue of each Asian nation from orders of 1994 whose customer and
-- supplier share the nation (an aggregate view, fedmodel.aggregate_view, over q5's join).
SELECT nation.n_name, SUM(lineitem.l_extendedprice * (1 - lineitem.l_discount)) AS revenue
FROM customer
JOIN orders ON customer.c_custkey = orders.o_custkey
JOIN lineitem ON lineitem.l_orderkey = orders.o_orderkey
JOIN supplier ON lineitem.l_suppkey = supplier.s_suppkey
             AND customer.c_nationkey = supplier.s_nationkey
JOIN nation ON supplier.s_nationkey = nation.n_nationkey
JOIN region ON nation.n_regionkey = region.r_regionkey
WHERE region.r_name = 'ASIA'
  AND orders.o_orderdate >= '1994-01-01'
  AND orders.o_orderdate < '1995-01-01'
GROUP BY nation.n_name
