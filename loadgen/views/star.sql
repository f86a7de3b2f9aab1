-- A star around lineitem: its order, part and supplier, with every key in the select list.
SELECT lineitem.l_orderkey, lineitem.l_linenumber, lineitem.l_partkey, lineitem.l_suppkey,
       lineitem.l_quantity, orders.o_orderdate, part.p_brand, supplier.s_name
FROM lineitem
JOIN orders ON lineitem.l_orderkey = orders.o_orderkey
JOIN part ON lineitem.l_partkey = part.p_partkey
JOIN supplier ON lineitem.l_suppkey = supplier.s_suppkey
WHERE part.p_size <= 10
