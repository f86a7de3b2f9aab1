-- An urgent German order deleted with its line items, in one statement (issue 37's third script,
-- weight 2): one of those new_order.sql inserted, the first from a random key on (none past it:
-- nothing is deleted). One that another client is deleting is skipped, not waited for. Taking
-- TPC-H's own would soon leave none near a random key, and each client would scan the table.
\set o random(1000000000, 9000000000)
WITH victim AS (
  SELECT o_orderkey FROM orders WHERE o_orderkey >= :o ORDER BY o_orderkey LIMIT 1 FOR UPDATE SKIP LOCKED),
lines AS (DELETE FROM lineitem WHERE l_orderkey = (SELECT o_orderkey FROM victim))
DELETE FROM orders WHERE o_orderkey = (SELECT o_orderkey FROM victim);
