-- An outer join (fedmodel.outer_joins): customers outside AUTOMOBILE with their urgent orders of
-- 1995 on, and each customer without one once, padded with NULLs (most have one such order or
-- none). A customer whose last one is deleted, moved to another customer or no longer urgent
-- comes back padded; a new customer comes in padded.
SELECT customer.c_custkey, customer.c_name, nation.n_name, orders.o_orderkey, orders.o_orderdate
FROM customer
JOIN nation ON nation.n_nationkey = customer.c_nationkey
LEFT JOIN orders ON orders.o_custkey = customer.c_custkey
                AND orders.o_orderpriority = '1-URGENT' AND orders.o_orderdate >= '1995-01-01'
WHERE customer.c_mktsegment <> 'AUTOMOBILE'
