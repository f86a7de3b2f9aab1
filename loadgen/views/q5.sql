-- TPC-H Q5 without its aggregate: revenue lines where customer and supplier share an Asian
-- nation. c_nationkey = s_nationkey closes a cycle customer-orders-lineitem-supplier-customer.
SELECT nation.n_name, lineitem.l_extendedprice, lineitem.l_discount
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
