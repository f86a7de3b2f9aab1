-- NOT EXISTS (an anti-join, fedmodel.rewrites.not_exists): the customers outside AUTOMOBILE with
-- no urgent order of 1995 on, the padded rows of customer_urgent_orders' LEFT JOIN. A customer
-- joins the view when its last such order goes and leaves it when it gets one.
SELECT customer.c_custkey, customer.c_name
FROM customer
WHERE customer.c_mktsegment <> 'AUTOMOBILE'
  AND NOT EXISTS (SELECT 1 FROM orders
                  WHERE orders.o_custkey = customer.c_custkey AND orders.o_orderpriority = '1-URGENT'
                    AND orders.o_orderdate >= '1995-01-01')
