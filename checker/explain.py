"""One account of a verdict, for `fedlab simulate` and `fedlab check` alike: the anomalies
(checker.anomalies), the first violating state row by row, and what happened to the
transactions involved.

What happened comes from the run's own record, through `happenings(transaction)`: a simulated
run's trace (`simulated_happenings`: the commit, each copy of its notification delivered or
dropped, the sub-queries of its maintenance, their answers, each compensation step, the state it
was applied in), a live run's message logs (`logged_happenings`: its notification sent, dropped,
duplicated, delayed and received by each node).
"""

from __future__ import annotations

from typing import Callable, Iterable

from fedlab.fedmodel.message_log import WAREHOUSE_NODE
from fedlab.checker.anomalies import vector_text

SHOWN_ROWS = 20          # rows listed per side of a row diff
SHOWN_TRANSACTIONS = 3   # transactions whose messages are listed


def render(verdict, happenings: Callable[[str], list[str]] | None = None) -> list[str]:
    """Lines that explain `verdict` (checker.levels.Verdict); none for a complete run.
    `happenings(source:DSV)` lists what the run did with a transaction."""
    lines = [f"anomaly {a['anomaly']}: {a['says']}" for a in verdict.anomalies]
    f = verdict.first_violation
    if f:
        lines += [f"  view held ({len(f['view'])} rows): {few(f['view'])}",
                  f"  should be ({len(f['expected'])} rows): {few(f['expected'])}",
                  f"  missing: {few(f['missing'])}", f"  extra:   {few(f['extra'])}"]
    o = verdict.order_violation
    if o:
        lines.append(f"  state {o['state']} is the view at {few([vector_text(m) for m in o['matches']])}, none at or "
                     f"above the lowest source states the states before it can map to, "
                     f"{few([vector_text(m) for m in o['not_below']])}")
    if happenings is not None:
        involved = list(dict.fromkeys(t for a in verdict.anomalies for t in a["transactions"]))
        for t in involved[:SHOWN_TRANSACTIONS]:
            lines.append(f"what happened to transaction {t}:")
            lines += ["  " + h for h in happenings(t)] or ["  nothing recorded"]
    return lines


def simulated_happenings(trace: list[dict], describe: Callable[[dict], str]) -> Callable[[str], list[str]]:
    """What a simulated run's `trace` (simulation.simulator) did with a transaction, each entry
    described by `describe`."""
    names = {f"{e['source']}:{e['dsv']}": e["txn"] for e in trace if e["event"] == "commit"}

    def of(transaction: str) -> list[str]:
        txn = names.get(transaction)
        if txn is None:
            return []
        served = f"{txn}/"
        subqueries = {e["id"] for e in trace if e["event"] == "subquery" and e.get("for", "").startswith(served)}
        return [describe(e) for e in trace if _concerns(e, txn, served, subqueries)]
    return of


def _concerns(e: dict, txn: str, served: str, subqueries: set) -> bool:
    kind = e["event"]
    if kind in ("commit", "apply"):
        return e["txn"] == txn
    if kind == "subquery":
        return e["id"] in subqueries
    if kind == "answer":
        return e["subquery"] in subqueries
    if kind == "compensate":
        return e["computation"].startswith(served)
    if "kind" in e and "what" in e:   # a message delivered, dropped, duplicated, held
        return e["what"] == txn or e["what"] in subqueries
    return False


def logged_happenings(entries: Iterable[dict]) -> Callable[[str], list[str]]:
    """What a live run's message logs (fedmodel.message_log lines) say of a transaction's
    notification: each copy sent, dropped, duplicated, delayed, received, by which node."""
    by_transaction: dict[str, list[str]] = {}
    for e in entries:
        if e.get("kind") == "notification" and "dsv" in e:
            source = e["node"] if e["node"] != WAREHOUSE_NODE else e["peer"]
            by_transaction.setdefault(f"{source}:{e['dsv']}", []).append(
                f"{e['t']:.3f} {e['node']} {e['event']} notification {e.get('txn_id', '')} (DSV {e['dsv']})")
    return lambda transaction: by_transaction.get(transaction, [])


def few(items: list) -> str:
    shown = ", ".join(str(i) for i in items[:SHOWN_ROWS])
    return f"[{shown}{f', ... ({len(items) - SHOWN_ROWS} more)' if len(items) > SHOWN_ROWS else ''}]"
