-- An urgent order of a German customer with two line items (issue 37's first script, weight 5).
-- Keys above TPC-H's: a random order key, a customer picked by a random key through the index.
-- The line items are inserted from the order row, so that none exists without its order (the
-- catalog's foreign key lineitem -> orders, on which the warehouse relies).
\set k random(1000000000, 9000000000)
\set c random(1, :customers)
BEGIN;
INSERT INTO orders
  SELECT :k, c_custkey, 'O', 1000.0, DATE '1998-08-01', '1-URGENT', 'Clerk#000000001', 0, 'pgbench'
  FROM customer WHERE c_nationkey = 7 AND c_custkey >= :c ORDER BY c_custkey LIMIT 1;
INSERT INTO lineitem
  SELECT o_orderkey, n, n, n, 5.0 * n, 500.0 * n, 0.0, 0.0, 'N', 'O', DATE '1998-08-02', DATE '1998-08-03',
         DATE '1998-08-04', 'NONE', 'MAIL', 'pgbench'
  FROM orders, (VALUES (1), (2)) AS lines(n) WHERE o_orderkey = :k;
COMMIT;
