-- The quantity of a line item of an urgent German order, plus one (issue 37's second script,
-- weight 3): the first line of the first such order from a random order key on, found through
-- the orders' index (every order has a first line).
\set o random(1, :orders)
UPDATE lineitem SET l_quantity = l_quantity + 1
 WHERE l_linenumber = 1 AND l_orderkey = (
   SELECT o.o_orderkey FROM orders o JOIN customer c ON c.c_custkey = o.o_custkey
    WHERE o.o_orderkey >= :o AND o.o_orderpriority = '1-URGENT' AND c.c_nationkey = 7
    ORDER BY o.o_orderkey LIMIT 1);
