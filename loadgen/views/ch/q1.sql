-- CH-benCHmark Q1 (original/q1.sql): the quantities and amounts of delivered order lines, by line
-- number. Changed: ORDER BY ol_number left out (a view's rows have no order; fedlab would accept
-- and ignore it in an aggregate view), and go-tpc's /*PLACEHOLDER*/ /*q1*/ comments and the
-- semicolon. The literal keeps its '.000000': under > the timestamp's ISO text compares as the
-- timestamp does (loadgen/ch/catalog.py).
select   ol_number,
         sum(ol_quantity) as sum_qty,
         sum(ol_amount) as sum_amount,
         avg(ol_quantity) as avg_qty,
         avg(ol_amount) as avg_amount,
         count(*) as count_order
from	 order_line
where	 ol_delivery_d > '2007-01-02 00:00:00.000000'
group by ol_number
