-- CH-benCHmark Q5: the revenue of European nations' local suppliers, by nation; it joins
-- tpcc's customers, orders, order lines and stock with suppliers' supplier and geography's
-- nation and region. Changed: the two joins through expressions join through the columns
-- that hold them, kept by triggers (loadgen/ch/catalog.py: stock.s_su_suppkey is mod(s_w_id * s_i_id,
-- 10000), customer.c_nationkey is ascii(substr(c_state, 1, 1)) - 65); ORDER BY revenue desc left
-- out, and go-tpc's comments and the semicolon.
select   n_name,
         sum(ol_amount) as revenue
from     customer, orders, order_line, stock, supplier, nation, region
where    c_id = o_c_id
  and c_w_id = o_w_id
  and c_d_id = o_d_id
  and ol_o_id = o_id
  and ol_w_id = o_w_id
  and ol_d_id = o_d_id
  and ol_w_id = s_w_id
  and ol_i_id = s_i_id
  and s_su_suppkey = s_suppkey
  and c_nationkey = s_nationkey
  and s_nationkey = n_nationkey
  and n_regionkey = r_regionkey
  and r_name = 'EUROPE'
  and o_entry_d >= '2007-01-02 00:00:00.000000'
group by n_name
