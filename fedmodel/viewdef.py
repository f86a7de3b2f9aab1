"""The view definition: select-project-join SQL parsed into a join graph (Sze-Ling equation 1).

`parse_view(sql, catalog)` accepts `SELECT cols FROM R1 JOIN R2 ON ... [JOIN ...] [WHERE ...]`
(or comma joins with the equalities in WHERE). Equalities between columns of two relations are
join edges; predicates over one relation are that relation's selection, pushed to its source;
anything else is rejected with one line that says what and where. With LEFT, RIGHT or FULL
joins the view is the union of the terms of their join-disjunctive normal form
(fedmodel.outer_joins: `outer`), NULL-padded, which the algorithms maintain as they maintain a
join; the user's outer-join view is a function of it (fedmodel.outer_join_view). Other spellings of such a view
(`*`, USING, NATURAL, WITH queries, derived tables, two columns of one name) are first rewritten
into this form (fedmodel.rewrites).

A view whose select list lacks the key of some relation carries a trailing count column
(multiplicity), as in the paper's examples.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import sqlglot
from sqlglot import exp

from fedlab.fedmodel.catalog import Catalog, Relation
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.outer_joins import JoinTree, OuterJoins, conjuncts, from_tree
from fedlab.fedmodel.predicates import compile_predicate, predicate_sql, validate_types


@dataclass(frozen=True)
class ColumnRef:
    relation: str
    column: str

    def __str__(self) -> str:
        return f"{self.relation}.{self.column}"


@dataclass(frozen=True)
class JoinEdge:
    """All equalities between two relations: R_a.pairs[i][0] = R_b.pairs[i][1]."""

    a: str
    b: str
    pairs: tuple[tuple[str, str], ...]

    def columns_of(self, relation: str) -> tuple[str, ...]:
        if relation == self.a:
            return tuple(p[0] for p in self.pairs)
        if relation == self.b:
            return tuple(p[1] for p in self.pairs)
        raise KeyError(relation)

    def other(self, relation: str) -> str:
        return self.b if relation == self.a else self.a


@dataclass(frozen=True)
class OutputColumn:
    name: str
    ref: ColumnRef


@dataclass(frozen=True)
class Selection:
    """The conjunction of a relation's local predicates, as SQL (for sources) and compiled."""

    relation: str
    sql: str
    test: Callable[[Sequence], bool]
    columns: frozenset  # the relation's columns the predicate reads


def per_view(fn):
    """Computes `fn(view, *args)` once per view and argument tuple (arguments must be hashable and
    the result must not be changed by callers): for questions about the view's structure only."""
    @functools.wraps(fn)
    def memoized(view: "ViewDef", *args, **kwargs):
        key = (fn.__qualname__, args, tuple(sorted(kwargs.items())) if kwargs else ())
        try:
            return view._memo[key]
        except KeyError:
            value = view._memo[key] = fn(view, *args, **kwargs)
            return value
    return memoized


@dataclass(frozen=True)
class ViewDef:
    sql: str
    relations: tuple[str, ...]
    edges: tuple[JoinEdge, ...]
    selections: dict  # relation -> Selection
    outputs: tuple[OutputColumn, ...]
    has_count: bool
    catalog: Catalog   # the sources' relations, and the occurrences of those the view reads twice
    bases: dict = field(default_factory=dict)   # occurrence -> the relation it reads (self-joins)
    # The select-project-join SQL parsed: `sql` after fedmodel.rewrites (stars expanded, USING as ON,
    # WITH queries and derived tables flattened, names made distinct), for engines that evaluate
    # the view as fedlab maintains it (Spark) and for rewriting it further (key widening).
    rewritten: str = ""
    # With outer joins, the terms whose NULL-padded rows the view holds (fedmodel.outer_joins);
    # None for a view of inner joins only.
    outer: OuterJoins | None = None
    # Answers of per_view functions: the view never changes once parsed, and the maintenance core
    # asks the same questions of it (equivalences, key paths, plans) for every transaction.
    _memo: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def output_names(self) -> tuple[str, ...]:
        """The view's columns, without the count."""
        return tuple(o.name for o in self.outputs)

    @property
    def column_names(self) -> tuple[str, ...]:
        return self.output_names + (("count",) if self.has_count else ())

    @property
    def join(self) -> "ViewDef":
        """The select-project-join view the algorithms maintain for this one: itself (a
        aggregate view's is the join under it: fedmodel.aggregate_view)."""
        return self

    @property
    def output_types(self) -> tuple[str, ...]:
        """The catalog type of each output column (the count, if any, is not one)."""
        return tuple(self.relation(o.ref.relation).type_of(o.ref.column) for o in self.outputs)

    def relation(self, name: str) -> Relation:
        return self.catalog.relation(name)

    def base_of(self, relation: str) -> str:
        """The sources' relation a relation of the view reads (an occurrence's, or itself)."""
        return self.bases.get(relation, relation)

    def relations_read_at(self, source: str) -> list[str]:
        """The relations of `source` the view reads, in catalog order: what a warehouse keeping
        it subscribes to there (source_node.subscriptions)."""
        read = {self.base_of(r) for r in self.relations}
        return [r.name for r in self.catalog.relations_at(source) if r.name in read]

    @per_view
    def edges_of(self, relation: str) -> tuple[JoinEdge, ...]:
        return tuple(e for e in self.edges if relation in (e.a, e.b))

    @per_view
    def edge(self, a: str, b: str) -> JoinEdge | None:
        for e in self.edges:
            if {e.a, e.b} == {a, b}:
                return e
        return None

    @per_view
    def neighbours(self, relation: str) -> tuple[str, ...]:
        return tuple(e.other(relation) for e in self.edges_of(relation))

    def selection_test(self, relation: str) -> Callable[[Sequence], bool]:
        sel = self.selections.get(relation)
        return sel.test if sel else _always

    def selection_sql(self, relation: str) -> str:
        sel = self.selections.get(relation)
        return sel.sql if sel else ""

    def selection_columns(self, relation: str) -> frozenset[str]:
        sel = self.selections.get(relation)
        return sel.columns if sel else frozenset()

    @per_view
    def join_columns(self, relation: str) -> frozenset[str]:
        """Columns of `relation` that appear in any join edge of the view."""
        return frozenset(c for e in self.edges_of(relation) for c in e.columns_of(relation))

    @per_view
    def visible_columns(self, relation: str) -> frozenset[str]:
        """Columns of `relation` whose values a view row shows, directly or through a join equality."""
        out = set()
        for o in self.outputs:
            for ref in self.equivalents(o.ref):
                if ref.relation == relation:
                    out.add(ref.column)
        return frozenset(out)

    @per_view
    def equivalents(self, ref: ColumnRef, outer: bool = False) -> frozenset[ColumnRef]:
        """All columns equal to `ref` in every view row through chains of join equalities; not
        through an outer join's, whose sides are NULL in the rows of the terms that lack them,
        unless `outer` (the columns whose values meet where both sides are present)."""
        seen = {ref}
        frontier = [ref]
        while frontier:
            cur = frontier.pop()
            for e in self.edges_of(cur.relation):
                if not outer and self.outer is not None and not self.outer.together(e.a, e.b):
                    continue
                for ca, cb in e.pairs:
                    mine, theirs = (ca, cb) if cur.relation == e.a else (cb, ca)
                    if mine == cur.column:
                        nxt = ColumnRef(e.other(cur.relation), theirs)
                        if nxt not in seen:
                            seen.add(nxt)
                            frontier.append(nxt)
        return frozenset(seen)

    @per_view
    def output_positions(self, relation: str, column: str) -> tuple[int, ...]:
        """Every view column that shows `relation.column` (directly, again under another name, or
        through a join equality)."""
        target = self.equivalents(ColumnRef(relation, column))
        return tuple(i for i, o in enumerate(self.outputs) if o.ref in target)

    def output_position(self, relation: str, column: str) -> int | None:
        """The first view column that shows `relation.column`, if any (enough to find rows by it)."""
        return next(iter(self.output_positions(relation, column)), None)

    def components(self) -> list[list[str]]:
        """Connected components of the join graph, each in FROM order."""
        comps: list[list[str]] = []
        seen: set[str] = set()
        for r in self.relations:
            if r in seen:
                continue
            comp, stack = [], [r]
            seen.add(r)
            while stack:
                cur = stack.pop()
                comp.append(cur)
                for n in self.neighbours(cur):
                    if n not in seen:
                        seen.add(n)
                        stack.append(n)
            comps.append([x for x in self.relations if x in comp])
        return comps


def _always(_row) -> bool:
    return True


def read_at(views: Iterable[ViewDef], source: str) -> list[str]:
    """The relations of `source` that any of `views` reads, sorted: what a warehouse keeping them
    subscribes to there."""
    return sorted({r for view in views for r in view.relations_read_at(source)})


def parse_view(sql: str, catalog: Catalog) -> ViewDef:
    """Parses the view SQL against the catalog; raises ModelError with one clear line on bad input.

    Small passes over one sqlglot tree: the statement (`_select`), the rewrites to a plain
    select-project-join (fedmodel.rewrites), the relations in FROM and the names they go by
    (`_from_clause`), the conditions as join edges and per-relation selections (`_conditions`,
    `_selections`), and the select list (`_outputs`).

    >>> from fedlab.fedmodel.catalog import Catalog
    >>> cat = Catalog.from_dict({"sources": {"ds1": {"R1": {"columns": ["A", "B"], "key": ["A"]}},
    ...                                       "ds2": {"R2": {"columns": ["B", "C"], "key": ["B"]}}}})
    >>> v = parse_view("SELECT C FROM R1 JOIN R2 ON R1.B = R2.B", cat)
    >>> v.column_names, v.edges[0].pairs
    (('C', 'count'), (('B', 'B'),))
    """
    # Imported here: the rewrites use this module's helpers.
    from fedlab.fedmodel.rewrites import rewrite

    tree = rewrite(_select(sql), catalog)
    construct = aggregated_by(tree)
    if construct is not None:
        raise ModelError(f"view: {construct} makes an aggregate view, which `fedlab simulate` maintains "
                         "(fedmodel.aggregate_view); live runs take select-project-join views only")
    refuse_clauses(tree, SELECT_PARTS, "")
    scope, bases, shape, where = _from_clause(tree, catalog)
    where, padded = _padding_tests(where, shape, scope)
    edges, local = _conditions(shape.conjuncts() + where, scope)
    selections = _selections(local, scope.catalog)
    outer = _outer_joins(shape, where, padded, scope, edges)
    outputs = _outputs(tree, scope)
    order, catalog = tuple(scope.order), scope.catalog
    view = ViewDef(sql, order, edges, selections, outputs, False, catalog, bases, tree.sql(), outer)
    has_count = not all(set(catalog.relation(r).key) <= view.visible_columns(r) for r in order)
    return ViewDef(sql, order, edges, selections, outputs, has_count, catalog, bases, tree.sql(), outer)


def _select(sql: str) -> exp.Select:
    """The one SELECT statement `sql` holds."""
    if not isinstance(sql, str) or not sql.strip():
        raise ModelError("view: the view SQL is empty")
    try:
        tree = sqlglot.parse_one(sql)
    except sqlglot.errors.ParseError as err:
        first = str(err).splitlines()[0]
        raise ModelError(f"view: malformed SQL: {first}") from None
    if isinstance(tree, (exp.Union, exp.Except, exp.Intersect)):
        operation = type(tree).__name__.upper() + ("" if tree.args.get("distinct") else " ALL")
        raise ModelError(f"view: {operation} is not supported; a view is one SELECT ... FROM ... statement")
    if not isinstance(tree, exp.Select):
        raise ModelError(f"view: expected a single SELECT ... FROM ... statement, got {clip(tree.sql())}")
    return tree


@dataclass
class _Scope:
    """The relations in FROM, in order (occurrence names), and the names they go by: what a column
    reference resolves against."""

    catalog: Catalog               # with the view's occurrences of a relation read twice
    order: list[str]
    aliases: dict[str, str]        # lower-case name in the SQL -> occurrence name

    def resolve(self, col: exp.Column) -> ColumnRef | _Ambiguous:
        if col.table:
            rel_name = self.aliases.get(col.table.lower())
            if rel_name is None:
                raise ModelError(f"view: unknown relation {col.table!r} in {col.sql()}")
            rel = self.catalog.relation(rel_name)
            if not rel.has_column(col.name):
                raise ModelError(f"view: relation {rel.name} has no column {col.name!r}")
            return ColumnRef(rel.name, rel.columns[rel.index(col.name)])
        owners = [self.catalog.relation(r) for r in self.order if self.catalog.relation(r).has_column(col.name)]
        if not owners:
            raise ModelError(f"view: no relation in FROM has a column {col.name!r}")
        refs = [ColumnRef(o.name, o.columns[o.index(col.name)]) for o in owners]
        return refs[0] if len(refs) == 1 else _Ambiguous(col.name, refs)  # settled once edges are known

    def column_type(self, col: exp.Column) -> str:
        ref = self.resolve(col)
        return self.catalog.relation(ref.relation).type_of(ref.column)


def _from_clause(tree: exp.Select, catalog: Catalog) -> tuple[_Scope, dict, JoinTree, list[exp.Expression]]:
    """The relations FROM and its joins read, the occurrences of a relation read twice
    (fedmodel.occurrences), the join tree (fedmodel.outer_joins: its ON conditions), and the
    conjuncts of WHERE."""
    from_ = tree.args.get("from_") or tree.args.get("from")
    if from_ is None:
        raise ModelError("view: missing FROM clause")
    joins = list(tree.find_all(exp.Join))   # parenthesised joins' too
    for clause, condition in [("WHERE", tree.args.get("where"))] + [("ON", j.args.get("on")) for j in joins]:
        subquery = condition.find(exp.Select) if condition else None
        if subquery:
            raise ModelError(f"view: a subquery ({_construct(subquery)}) in {clause} is not supported")
    for j in joins:
        refuse_clauses(j, _JOIN_PARTS, f" in {j.sql()}")
    shape = from_tree(from_.this, tree.args.get("joins") or [])
    tables = shape.tables()
    for t in tables:
        base_relation(t, catalog)
    bases = occurrences(tables, catalog)
    catalog = catalog.with_occurrences(bases)
    order: list[str] = []
    aliases: dict[str, str] = {}
    for t in tables:
        name = occurrence_name(t, bases, catalog)
        if name in order:
            raise ModelError(f"view: relation {catalog.relation(t.name).name} appears twice under the name {name}; "
                             "give each occurrence an alias of its own")
        order.append(name)
        if (t.alias or t.name).lower() in aliases:
            raise ModelError(f"view: the name {t.alias or t.name} is given to two relations in FROM; "
                             "give each its own alias")
        aliases[(t.alias or t.name).lower()] = name
    for name in order:   # a relation read once may be named by itself too, unless an alias took the name
        if name not in bases:
            aliases.setdefault(name.lower(), name)
    where = conjuncts(tree.args["where"].this) if tree.args.get("where") else []
    return _Scope(catalog, order, aliases), bases, shape, where


def _conditions(conjuncts: list[exp.Expression], scope: _Scope) -> tuple[tuple[JoinEdge, ...], dict]:
    """The join edges (equalities between two relations' columns, the pairs of each pair of
    relations together) and the conjuncts local to one relation, relation -> conjuncts."""
    edge_pairs: dict[tuple[str, str], list[tuple[str, str]]] = {}
    local: dict[str, list[exp.Expression]] = {}
    for c in conjuncts:
        refs = [scope.resolve(col) for col in c.find_all(exp.Column)]
        for r in refs:
            if isinstance(r, _Ambiguous):
                raise ModelError(f"view: column {r.name!r} is ambiguous in {c.sql()}; qualify it")
        validate_types(c, scope.column_type)
        rels = {r.relation for r in refs}
        if len(rels) >= 2:
            if not (isinstance(c, exp.EQ) and isinstance(c.this, exp.Column)
                    and isinstance(c.expression, exp.Column) and len(rels) == 2):
                raise ModelError(f"view: only equalities may relate two relations, got {c.sql()}")
            ra, rb = refs
            key = tuple(sorted((ra.relation, rb.relation), key=scope.order.index))
            pair = (ra.column, rb.column) if ra.relation == key[0] else (rb.column, ra.column)
            if pair not in edge_pairs.setdefault(key, []):
                edge_pairs[key].append(pair)
        else:
            rel = next(iter(rels)) if rels else scope.order[0]
            local.setdefault(rel, []).append(c)
    return tuple(JoinEdge(a, b, tuple(p)) for (a, b), p in edge_pairs.items()), local


def _padding_tests(where: list[exp.Expression], shape: JoinTree, scope: _Scope
                   ) -> tuple[list[exp.Expression], list[tuple[exp.Expression, ColumnRef]]]:
    """WHERE's conjuncts apart from those of the anti-join idiom, `X.c IS NULL` on a column of an
    outer join's ON (`r LEFT JOIN s ON r.i = s.i WHERE s.i IS NULL`: r's rows without a partner),
    each with the column it tests; `_outer_joins` checks they test for padding."""
    if not shape.sides():
        return where, []
    on = {scope.resolve(c) for condition in shape.conjuncts() for c in condition.find_all(exp.Column)}
    tests = [(c, scope.resolve(c.this)) for c in where if isinstance(c, exp.Is) and isinstance(c.this, exp.Column)
             and isinstance(c.expression, exp.Null) and scope.resolve(c.this) in on]
    return [c for c in where if all(c is not t for t, _ in tests)], tests


def _outer_joins(shape: JoinTree, where: list[exp.Expression], padded: list[tuple[exp.Expression, ColumnRef]],
                 scope: _Scope, edges: tuple[JoinEdge, ...]) -> OuterJoins | None:
    """The terms of a view with outer joins (fedmodel.outer_joins); None when it has one term, an
    inner join (an outer join whose padded rows WHERE rejects is one). `padded`: WHERE's tests of
    the anti-join idiom, each of which must hold exactly in the rows padded where its column is:
    the column is on an edge to a relation every term holding its own holds too, so that it is
    not NULL where its relation is not padded."""
    if not shape.sides():
        return None

    def name_of(table: exp.Table) -> str:
        return scope.aliases[(table.alias or table.name).lower()]

    def relations_of(condition: exp.Expression) -> set[str]:
        return {scope.resolve(c).relation for c in condition.find_all(exp.Column)} or {scope.order[0]}

    def rejects_nulls(condition: exp.Expression) -> bool:
        (relation,) = relations_of(condition)
        rel = scope.catalog.relation(relation)
        return not _selections({relation: [condition]}, scope.catalog)[relation].test((None,) * len(rel.columns))

    terms = shape.terms(name_of, relations_of, where, rejects_nulls)
    for test, ref in padded:
        partners = [e.other(ref.relation) for e in edges
                    if ref.relation in (e.a, e.b) and ref.column in e.columns_of(ref.relation)]
        if not any(all(p in t for t in terms if ref.relation in t) for p in partners) or len(terms) == 1:
            raise ModelError(f"view: {test.sql()} in WHERE tests {ref} for NULL where it is not only padded; "
                             "the anti-join idiom tests a column its relation joins by toward the preserved side")
    if len(terms) == 1:
        return None
    written = " ".join(f"{side} JOIN" for side in dict.fromkeys(shape.sides()))
    linked = {frozenset((e.a, e.b)) for e in edges}
    if len(linked) != len(scope.order) - 1 or not all(_connected(t, linked) for t in terms):
        raise ModelError(f"view: {written} over a join graph with a cycle or a cartesian product is not "
                         "supported; outer joins need the relations joined as a tree of equalities")
    return OuterJoins(tuple(sorted(terms, key=lambda t: (-len(t), sorted(scope.order.index(r) for r in t)))),
                      frozenset(ref.relation for _, ref in padded))


def _connected(relations: frozenset, linked: set[frozenset]) -> bool:
    """Whether `relations` are connected by the edges `linked` (pairs of relations)."""
    start = next(iter(relations))
    seen, frontier = {start}, [start]
    while frontier:
        cur = frontier.pop()
        for pair in linked:
            if cur in pair and pair <= relations:
                (other,) = pair - {cur}
                if other not in seen:
                    seen.add(other)
                    frontier.append(other)
    return seen == set(relations)


def _selections(local: dict[str, list[exp.Expression]], catalog: Catalog) -> dict[str, Selection]:
    """Each relation's local conjuncts as one compiled selection over its own column names."""
    selections = {}
    for rel_name, preds in local.items():
        rel = catalog.relation(rel_name)
        expr = exp.and_(*[p.copy() for p in preds]) if len(preds) > 1 else preds[0].copy()
        for col in expr.find_all(exp.Column):
            col.set("table", None)
            col.set("this", exp.to_identifier(rel.columns[rel.index(col.name)]))
        selections[rel_name] = Selection(rel_name, predicate_sql(expr), compile_predicate(expr, rel),
                                         frozenset(c.name for c in expr.find_all(exp.Column)))
    return selections


def _outputs(tree: exp.Select, scope: _Scope) -> tuple[OutputColumn, ...]:
    """The select list: columns only, each of one relation, none named `count`."""
    outputs: list[OutputColumn] = []
    for item in tree.expressions:
        name = item.alias_or_name
        target = item.this if isinstance(item, exp.Alias) else item
        if not isinstance(target, exp.Column):
            raise ModelError(f"view: {_select_item(target)} in the select list is not supported "
                             f"(items must be columns), got {clip(item.sql())}")
        ref = scope.resolve(target)
        if isinstance(ref, _Ambiguous):
            owners = " or ".join(f"{r.relation}.{r.column}" for r in ref.refs)
            raise ModelError(f"view: column {ref.name!r} is ambiguous in the select list; write {owners}")
        if name.lower() == "count":
            raise ModelError(f"view: the output column name {name!r} ({item.sql()}) is reserved for the "
                             "multiplicity; give it another alias")
        outputs.append(OutputColumn(name, ref))
    if not outputs:
        raise ModelError("view: the select list is empty")
    return tuple(outputs)


def with_columns(view: ViewDef, columns: list[tuple[str, str]]) -> ViewDef:
    """`view` with `columns` ((relation, column) pairs) appended to its select list, each named by
    its column, or `<relation>_<column>` when that name is taken (with `_`s added until free):
    the Strobe family's view widened with keys, an outer join's with the columns that tell its
    rows' terms apart (fedmodel.outer_join_view)."""
    tree = sqlglot.parse_one(view.rewritten)
    written = {occurrence_name(t, view.bases, view.catalog).lower(): t.alias_or_name for t in tree.find_all(exp.Table)}
    taken = {o.name.lower() for o in view.outputs} | {"count"}
    for relation, column in columns:
        name = column if column.lower() not in taken else f"{relation}_{column}"
        while name.lower() in taken:
            name += "_"
        taken.add(name.lower())
        tree = tree.select(exp.alias_(exp.column(column, table=written[relation.lower()]), name), copy=False)
    return parse_view(tree.sql(), view.catalog)


def base_relation(item: exp.Expression, catalog: Catalog) -> Relation:
    """The catalog's relation a FROM item names; ModelError (one line) for any other FROM item."""
    if isinstance(item, exp.Table) and not isinstance(item.this, exp.Identifier):   # FROM f(...)
        raise ModelError(f"view: a function in FROM ({item.this.sql()}) is not supported; name base relations")
    if not isinstance(item, exp.Table):
        raise ModelError(f"view: {_from_item(item)} in FROM is not supported; name base relations, "
                         f"got {clip(item.sql())}")
    refuse_clauses(item, _TABLE_PARTS, f" on {item.name}")
    if not catalog.has_relation(item.name):
        raise ModelError(f"view: unknown relation {item.name!r} in FROM")
    return catalog.relation(item.name)


def occurrences(tables: list[exp.Table], catalog: Catalog) -> dict[str, str]:
    """The occurrences of relations a view reads more than once (a self-join), each named by its
    alias in FROM: occurrence -> relation, for those whose name is not the relation's own. Each is
    a relation of the view of its own (Catalog.with_occurrences; warehouse.core.occurrences)."""
    seen = Counter(catalog.relation(t.name).name for t in tables)
    return {t.alias_or_name: catalog.relation(t.name).name for t in tables
            if seen[catalog.relation(t.name).name] > 1 and t.alias_or_name.lower() != t.name.lower()}


def occurrence_name(table: exp.Table, bases: dict[str, str], catalog: Catalog) -> str:
    """The name of the view's relation that `table` in FROM is: an occurrence's (`bases`), or
    the relation's own."""
    alias = table.alias_or_name.lower()
    return next((o for o in bases if o.lower() == alias), catalog.relation(table.name).name)


def aggregated_by(tree: exp.Select) -> str | None:
    """The construct that makes `tree` an aggregate view (fedmodel.aggregate_view), as SQL spells it:
    GROUP BY, DISTINCT, HAVING or an aggregate of the select list itself (not one inside a
    window function or a subquery, which are other constructs); None for none."""
    for part, spelled in (("group", "GROUP BY"), ("distinct", "DISTINCT"), ("having", "HAVING")):
        if tree.args.get(part):
            return spelled
    for item in tree.expressions:
        for function in item.find_all(exp.AggFunc):
            node = function.parent
            while node is not item.parent and not isinstance(node, (exp.Window, exp.Subquery)):
                node = node.parent
            if node is item.parent:
                return _select_item(function)
    return None


# The parts of a SELECT, a table in FROM and a join that a select-project-join view may use;
# any other part sqlglot parsed is refused by its SQL name (a clause silently dropped would
# leave the view holding other rows than the query says).
SELECT_PARTS = {"expressions", "from", "from_", "joins", "where"}
_TABLE_PARTS = {"this", "db", "catalog", "alias"}
_JOIN_PARTS = {"this", "on", "kind", "side"}   # kinds other than inner and outer: fedmodel.outer_joins
_SPELLING = {"group": "GROUP BY", "order": "ORDER BY", "limit": "LIMIT / FETCH FIRST", "locks": "FOR UPDATE / FOR SHARE",
             "sample": "TABLESAMPLE", "windows": "WINDOW", "laterals": "LATERAL", "pivots": "PIVOT",
             "connect": "CONNECT BY", "cluster": "CLUSTER BY", "distribute": "DISTRIBUTE BY", "sort": "SORT BY",
             "match": "MATCH_RECOGNIZE", "method": "NATURAL", "only": "ONLY", "version": "AS OF (time travel)",
             "system_time": "FOR SYSTEM_TIME", "changes": "CHANGES", "hints": "a table hint", "hint": "a hint",
             "ordinality": "WITH ORDINALITY", "partition": "PARTITION", "when": "WHEN", "indexed": "INDEXED BY",
             "into": "INTO", "for_": "FOR", "options": "OPTION", "operation_modifiers": "a modifier",
             "match_condition": "MATCH_CONDITION", "global_": "GLOBAL", "directed": "a directed join",
             "nearest": "NEAREST", "rows_from": "ROWS FROM", "exclude": "EXCLUDE"}


def refuse_clauses(node: exp.Expression, allowed: set[str], where: str) -> None:
    """Refuses, naming it, the first part of `node` outside `allowed` (see _SPELLING)."""
    for part, value in node.args.items():
        if part not in allowed and value not in (None, False, [], ""):
            spelled = _SPELLING.get(part, part.upper().rstrip("_"))
            raise ModelError(f"view: {spelled}{where} is not supported in a select-project-join view")


@dataclass(frozen=True)
class _Ambiguous:
    name: str
    refs: list


def _construct(subquery: exp.Select) -> str:
    """How SQL spells the construct around a nested SELECT, for a message."""
    holder = subquery.parent
    if isinstance(holder, exp.Subquery):   # the parentheses, in sqlglot's tree for some constructs
        holder = holder.parent
    if isinstance(holder, (exp.Exists, exp.In, exp.Any, exp.All)):
        return f"{type(holder).__name__.upper()} (SELECT ...)"
    return "scalar (SELECT ...)"


def _from_item(node: exp.Expression) -> str:
    """How SQL names a FROM item other than a base relation, for a message."""
    if isinstance(node, exp.Lateral):
        return "LATERAL"
    if isinstance(node, exp.Values):
        return "VALUES"
    if isinstance(node, exp.Subquery):
        return "a derived table (SELECT ...)" if isinstance(node.this, exp.Query) else "a parenthesised join"
    return type(node).__name__


def _select_item(node: exp.Expression) -> str:
    """How SQL names a select-list item other than a column, for a message."""
    if isinstance(node, exp.Window):
        return "a window function"
    if isinstance(node, exp.AggFunc):
        return f"an aggregate ({type(node).__name__.upper()})"
    if isinstance(node, exp.Subquery):
        return "a scalar subquery"
    if isinstance(node, exp.Literal):
        return "a constant"
    return "an expression"


def clip(sql: str, limit: int = 80) -> str:
    """`sql` cut to `limit` characters for an error line (the rewrites quote with it too)."""
    return sql if len(sql) <= limit else sql[:limit - 3] + "..."
