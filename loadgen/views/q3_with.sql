-- q3 as a pg_ivm user might write it: a WITH query, a derived table and stars, which the parser
-- rewrites into q3's select-project-join form (fedmodel.rewrites); the view keeps q3's rows.
WITH building AS (SELECT * FROM customer WHERE c_mktsegment = 'BUILDING')
SELECT l.l_orderkey, o.o_orderdate, o.o_shippriority, l.l_extendedprice, l.l_discount
FROM building
JOIN orders AS o ON building.c_custkey = o.o_custkey
JOIN (SELECT * FROM lineitem WHERE l_shipdate > '1995-03-15') AS l ON l.l_orderkey = o.o_orderkey
WHERE o.o_orderdate < '1995-03-15'
