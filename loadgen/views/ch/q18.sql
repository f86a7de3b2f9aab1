-- CH-benCHmark Q18 (original/q18.sql): the amount of every order, with its customer. Changed:
-- HAVING sum(ol_amount) > 200 left out, which fedlab refuses ("filter the groups when reading
-- the view"): the view holds every order's group, and a reader keeps those above 200, as it
-- sorts them by ORDER BY sum(ol_amount) desc, o_entry_d, also left out. go-tpc's
-- /*PLACEHOLDER*/ /*q18*/ comments left out too. Kept as go-tpc writes it: `c_id o_id`, the
-- column c_id named o_id (TPC-H's Q18 shows the customer's and the order's keys; a comma seems
-- lost), and the orders' keys grouped by but not shown, so the view has a count column.
select	 c_last, c_id o_id, o_entry_d, o_ol_cnt, sum(ol_amount)
from	 customer, orders, order_line
where	 c_id = o_c_id
  and c_w_id = o_w_id
  and c_d_id = o_d_id
  and ol_w_id = o_w_id
  and ol_d_id = o_d_id
  and ol_o_id = o_id
group by o_id, o_w_id, o_d_id, c_id, c_last, o_entry_d, o_ol_cnt
