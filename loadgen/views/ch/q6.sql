-- CH-benCHmark Q6 (original/q6.sql): the amount of the order lines delivered between 1997 and
-- 2030 with a quantity from 1 to 100000. Changed: go-tpc's /*PLACEHOLDER*/ /*q6*/ comments and
-- the semicolon left out, nothing else; its literals are written as PostgreSQL writes a
-- timestamp, whose ISO text then compares as the timestamp does (loadgen/ch/catalog.py).
select	sum(ol_amount) as revenue
from	order_line
where
  ol_delivery_d >= '1997-01-01 00:00:00'
  and ol_delivery_d < '2030-01-01 00:00:00'
  and ol_quantity between 1 and 100000
