-- CH-benCHmark Q3 (original/q3.sql): the revenue of each undelivered order (one in new_order) of a
-- customer whose state begins with 'a'. Changed: ORDER BY revenue desc, o_entry_d left out (a
-- view's rows have no order; a reader sorts them), and go-tpc's /*PLACEHOLDER*/ /*q3*/ comments
-- and the semicolon. The literal keeps its '.000000': under > the timestamp's ISO text compares as
-- the timestamp does (loadgen/ch/catalog.py).
select   ol_o_id, ol_w_id, ol_d_id,
         sum(ol_amount) as revenue, o_entry_d
from 	 customer, new_order, orders, order_line
where 	 c_state like 'a%'
  and c_id = o_c_id
  and c_w_id = o_w_id
  and c_d_id = o_d_id
  and no_w_id = o_w_id
  and no_d_id = o_d_id
  and no_o_id = o_id
  and ol_w_id = o_w_id
  and ol_d_id = o_d_id
  and ol_o_id = o_id
  and o_entry_d > '2007-01-02 00:00:00.000000'
group by ol_o_id, ol_w_id, ol_d_id, o_entry_d
