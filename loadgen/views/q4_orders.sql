-- TPC-H Q4 without its aggregate: the orders of a quarter with a line item received after its
-- commit date (EXISTS, a semi-join: fedmodel.rewrites.exists). Each order shows once, however
-- many of its line items are late.
SELECT orders.o_orderkey, orders.o_orderpriority
FROM orders
WHERE orders.o_orderdate >= '1993-07-01'
  AND orders.o_orderdate < '1993-10-01'
  AND EXISTS (SELECT * FROM lineitem
              WHERE lineitem.l_orderkey = orders.o_orderkey
                AND lineitem.l_commitdate < lineitem.l_receiptdate)
