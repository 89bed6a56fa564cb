//! Size pre-checks for evaluation: every operator, method and builtin that
//! can build a value past the heap limit in one step — before the
//! interpreter checks its heap again — is routed through a checked global
//! (`bindings/guards.rs`, `bindings/guards_calls.rs`) that refuses such a
//! result up front.
//!
//! - `*`, `%`, `+` and `<<` become calls of `_cordon_mul`, `_cordon_mod`,
//!   `_cordon_add`, `_cordon_shl` (`AstModule::replace_binary_operators`;
//!   this also stops the compiler's constant folding of
//!   `'a' * 2000000000`, which allocated before any limit ran);
//! - `x += e` (and `*=`, `%=`, `<<=`) becomes `x += _cordon_aug_add(x, e)`:
//!   the check sees both sides and hands `e` back, so the assignment keeps
//!   its own semantics (a list is extended in place). The target is
//!   written twice, so it must have no call in it (`l[f()] += …` is
//!   refused, with how to write it);
//! - `X.join(...)`, `.format`, `.replace`, `.extend`, `.split`,
//!   `.rsplit`, `.splitlines`, `.elems` and `.codepoints` (whose iterators
//!   the interpreter collects whole, one element a value, on first use)
//!   are rewritten in the source, by the parsed
//!   spans, to `_cordon_join(X, ...)` and so on; such a method taken as a
//!   value (`f = s.join`) is refused when the package is checked, since it
//!   would bypass the check (a struct field of one of those names can be
//!   called, not read);
//! - a call of `list`, `tuple`, `str` or `int` by name becomes
//!   `_cordon_ctor(list, ...)`: the callee is passed along, so a package's
//!   own `list` is simply called, and the builtins are checked;
//! - each expression of an f-string becomes `_cordon_piece(e)`, which
//!   refuses a value whose text would be too large;
//! - `sorted`, `reversed`, `enumerate`, `zip`, `repr`, `print`, `fail` and
//!   `getattr` are replaced by checked versions.
//!
//! This is defence for trusted packages in process, not a boundary: what
//! it still cannot see is listed in the crate README ("In process"). Untrusted
//! packages run in a sandboxed worker, and trusted ones by default in a
//! worker process with rlimits (`Isolation::Process`).

use std::collections::HashMap;

use starlark::syntax::ast::{ArgumentP, AssignOp, AssignTargetP, AstExpr, AstStmt, ExprP, StmtP};
use starlark::syntax::{AstModule, Dialect};

/// Methods whose result can dwarf their receiver and arguments, and the
/// checked globals that call them.
pub(crate) const METHODS: [(&str, &str); 9] = [
    ("join", "_cordon_join"),
    ("format", "_cordon_format"),
    ("replace", "_cordon_replace"),
    ("extend", "_cordon_extend"),
    ("split", "_cordon_split"),
    ("rsplit", "_cordon_rsplit"),
    ("splitlines", "_cordon_splitlines"),
    ("elems", "_cordon_elems"),
    ("codepoints", "_cordon_codepoints"),
];

/// Constructors (types, which cannot be replaced as globals without
/// breaking them as types) checked at their call sites.
const CONSTRUCTORS: [&str; 4] = ["list", "tuple", "str", "int"];

/// Operators and the checked globals they become.
const OPERATORS: [(&str, &str); 4] = [
    ("*", "_cordon_mul"),
    ("%", "_cordon_mod"),
    ("+", "_cordon_add"),
    ("<<", "_cordon_shl"),
];

/// What one change to the source text does at its position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// Replaces `start..end`.
    Replace,
    /// Opens a wrapper (`_cordon_x(`): outer ones first.
    Open,
    /// Closes one (`)`): inner ones first, before anything opened there.
    Close,
}

/// One change to the source text: insert or replace at a byte range.
struct Edit {
    start: usize,
    end: usize,
    text: String,
    kind: Kind,
    /// How deep in the expression tree, to order edits at one position.
    depth: usize,
}

/// Parses `src` as `path` with the guarded operators, methods,
/// constructors and assignments routed through their checks.
pub(crate) fn parse_guarded(
    path: &str,
    src: &str,
    dialect: &Dialect,
) -> Result<AstModule, starlark::Error> {
    let ast = AstModule::parse(path, src.to_owned(), dialect)?;
    let mut edits = Vec::new();
    let mut refused = None;
    walk_stmt(ast.statement(), src, &mut edits, &mut refused);
    ast.statement()
        .visit_expr(|e| collect(e, src, 1, &mut edits, &mut refused));
    if let Some(message) = refused {
        return Err(starlark::Error::new_other(anyhow::anyhow!(
            "{path}: {message}"
        )));
    }
    let mut ast = if edits.is_empty() {
        ast
    } else {
        AstModule::parse(path, apply(src, edits), dialect)?
    };
    let ops: HashMap<String, String> = OPERATORS
        .iter()
        .map(|(op, f)| ((*op).to_owned(), (*f).to_owned()))
        .collect();
    ast.replace_binary_operators(&ops);
    Ok(ast)
}

fn guard_for(name: &str) -> Option<&'static str> {
    METHODS.iter().find(|(m, _)| *m == name).map(|(_, g)| *g)
}

fn span(e: &AstExpr) -> (usize, usize) {
    (e.span.begin().get() as usize, e.span.end().get() as usize)
}

/// Whether evaluating `e` twice is the same as once: names, literals and
/// attribute or index chains of those (no call).
fn pure(e: &AstExpr) -> bool {
    match &e.node {
        ExprP::Identifier(_) | ExprP::Literal(_) => true,
        ExprP::Dot(x, _) => pure(x),
        ExprP::Index(pair) => pure(&pair.0) && pure(&pair.1),
        ExprP::Minus(x) | ExprP::Plus(x) => pure(x),
        _ => false,
    }
}

/// Finds the augmented assignments in `s` and its nested statements.
fn walk_stmt(s: &AstStmt, src: &str, edits: &mut Vec<Edit>, refused: &mut Option<String>) {
    if let StmtP::AssignModify(lhs, op, rhs) = &s.node {
        let guard = match op {
            AssignOp::Add => Some(("+=", "_cordon_aug_add")),
            AssignOp::Multiply => Some(("*=", "_cordon_aug_mul")),
            AssignOp::Percent => Some(("%=", "_cordon_aug_mod")),
            AssignOp::LeftShift => Some(("<<=", "_cordon_aug_shl")),
            _ => None,
        };
        if let Some((text, guard)) = guard {
            let target_pure = match &lhs.node {
                AssignTargetP::Identifier(_) => true,
                AssignTargetP::Dot(x, _) => pure(x),
                AssignTargetP::Index(pair) => pure(&pair.0) && pure(&pair.1),
                AssignTargetP::Tuple(_) => false,
            };
            if !target_pure {
                *refused = Some(format!(
                    "cannot check `{text}` on a target with a call in it; compute the index \
                     first (`i = f()`, then `l[i] {text} …`)"
                ));
                return;
            }
            let (ls, le) = (
                lhs.span.begin().get() as usize,
                lhs.span.end().get() as usize,
            );
            let (rs, re) = span(rhs);
            edits.push(Edit {
                start: rs,
                end: rs,
                text: format!("{guard}({}, ", &src[ls..le]),
                kind: Kind::Open,
                depth: 0,
            });
            edits.push(Edit {
                start: re,
                end: re,
                text: ")".into(),
                kind: Kind::Close,
                depth: 0,
            });
        }
    }
    s.visit_stmt(|c| walk_stmt(c, src, edits, refused));
}

/// The `(` after `at` in `src`, across whitespace only.
fn open_paren_after(src: &str, at: usize) -> Option<usize> {
    let rest = &src[at..];
    let gap = rest.len() - rest.trim_start().len();
    rest[gap..].starts_with('(').then_some(at + gap)
}

fn collect(
    e: &AstExpr,
    src: &str,
    depth: usize,
    edits: &mut Vec<Edit>,
    refused: &mut Option<String>,
) {
    match &e.node {
        ExprP::Call(callee, args) => {
            if let ExprP::Identifier(id) = &callee.node {
                let (cs, ce) = span(callee);
                if CONSTRUCTORS.contains(&id.node.ident.as_str()) {
                    let Some(paren) = open_paren_after(src, ce) else {
                        *refused = Some(format!("cannot check this call of `{}`", id.node.ident));
                        return;
                    };
                    edits.push(Edit {
                        start: cs,
                        end: cs,
                        text: "_cordon_ctor(".into(),
                        kind: Kind::Open,
                        depth,
                    });
                    // `f(` becomes `_cordon_ctor(f, `; `f()`, `_cordon_ctor(f)`.
                    let sep = if args.args.is_empty() { "" } else { ", " };
                    edits.push(Edit {
                        start: paren,
                        end: paren + 1,
                        text: sep.into(),
                        kind: Kind::Replace,
                        depth,
                    });
                    for a in &args.args {
                        let (ArgumentP::Positional(x)
                        | ArgumentP::Named(_, x)
                        | ArgumentP::Args(x)
                        | ArgumentP::KwArgs(x)) = &a.node;
                        collect(x, src, depth + 1, edits, refused);
                    }
                    return;
                }
            }
            if let ExprP::Dot(obj, name) = &callee.node {
                if let Some(guard) = guard_for(&name.node) {
                    method(e, callee, obj, name, guard, src, depth, edits, refused);
                    return;
                }
            }
        }
        ExprP::Dot(_, name) if guard_for(&name.node).is_some() => {
            // A method taken as a value would skip the size check.
            *refused = Some(format!(
                "`.{}` may only be called directly (`x.{}(...)`), not taken as a value",
                name.node, name.node
            ));
            return;
        }
        ExprP::FString(fs) => {
            for x in &fs.node.expressions {
                let (xs, xe) = span(x);
                if xe > src.len() || xs >= xe {
                    *refused = Some("cannot check this f-string".into());
                    return;
                }
                edits.push(Edit {
                    start: xs,
                    end: xs,
                    text: "_cordon_piece(".into(),
                    kind: Kind::Open,
                    depth,
                });
                edits.push(Edit {
                    start: xe,
                    end: xe,
                    text: ")".into(),
                    kind: Kind::Close,
                    depth,
                });
                collect(x, src, depth + 1, edits, refused);
            }
            return;
        }
        _ => {}
    }
    e.visit_expr(|c| collect(c, src, depth + 1, edits, refused));
}

/// `obj.name(args)` becomes `guard(obj, args)`.
#[allow(clippy::too_many_arguments)]
fn method(
    e: &AstExpr,
    callee: &AstExpr,
    obj: &AstExpr,
    name: &starlark::syntax::ast::AstString,
    guard: &str,
    src: &str,
    depth: usize,
    edits: &mut Vec<Edit>,
    refused: &mut Option<String>,
) {
    let cannot = || Some(format!("cannot check `.{}` here", name.node));
    let name_start = name.span.begin().get() as usize;
    let name_end = name.span.end().get() as usize;
    // The `.` before the name, across whitespace only.
    let before = &src[..name_start];
    let dot = before.trim_end().len().checked_sub(1);
    let Some(dot) = dot.filter(|d| src.as_bytes()[*d] == b'.') else {
        *refused = cannot();
        return;
    };
    // The receiver's span leaves out its parentheses: as many `(` before
    // it as there are `)` between it and the dot.
    let obj_end = obj.span.end().get() as usize;
    let between = &src[obj_end.min(dot)..dot];
    if !between.chars().all(|c| c == ')' || c.is_whitespace()) {
        *refused = cannot();
        return;
    }
    let mut obj_start = obj.span.begin().get() as usize;
    for _ in 0..between.matches(')').count() {
        let head = src[..obj_start].trim_end();
        if !head.ends_with('(') {
            *refused = cannot();
            return;
        }
        obj_start = head.len() - 1;
    }
    let Some(paren) = open_paren_after(src, name_end) else {
        *refused = Some(format!(
            "`.{}` must be called directly, as `x.{}(...)`",
            name.node, name.node
        ));
        return;
    };
    edits.push(Edit {
        start: obj_start,
        end: obj_start,
        text: format!("{guard}("),
        kind: Kind::Open,
        depth,
    });
    // `.name(` becomes `, `, keeping any newlines so that line numbers
    // stay right.
    let removed = &src[dot..paren + 1];
    let newlines = "\n".repeat(removed.matches('\n').count());
    edits.push(Edit {
        start: dot,
        end: paren + 1,
        text: format!(", {newlines}"),
        kind: Kind::Replace,
        depth,
    });
    // The receiver and the arguments may hold more.
    e.visit_expr(|c| {
        if std::ptr::eq(c, callee) {
            collect(obj, src, depth + 1, edits, refused)
        } else {
            collect(c, src, depth + 1, edits, refused)
        }
    });
}

/// Applies non-overlapping edits, from the end of the text backwards. At
/// one position, text applied later lands first: so replacements are
/// applied first, then openings inner to outer, then closings outer to
/// inner (a closing ends what came before the position).
fn apply(src: &str, mut edits: Vec<Edit>) -> String {
    edits.sort_by(|a, b| {
        b.start
            .cmp(&a.start)
            .then(a.kind.cmp(&b.kind))
            .then(match a.kind {
                Kind::Close => a.depth.cmp(&b.depth),
                _ => b.depth.cmp(&a.depth),
            })
    });
    let mut out = src.to_owned();
    for e in edits {
        out.replace_range(e.start..e.end, &e.text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dialect() -> Dialect {
        Dialect {
            enable_f_strings: true,
            ..Dialect::Standard
        }
    }

    fn rewritten(src: &str) -> String {
        let ast = AstModule::parse("t.star", src.to_owned(), &dialect()).unwrap();
        let mut edits = Vec::new();
        let mut refused = None;
        walk_stmt(ast.statement(), src, &mut edits, &mut refused);
        ast.statement()
            .visit_expr(|e| collect(e, src, 1, &mut edits, &mut refused));
        assert_eq!(refused, None);
        apply(src, edits)
    }

    #[test]
    fn method_calls_become_guarded_calls() {
        assert_eq!(rewritten("x = ','.join(l)\n"), "x = _cordon_join(',', l)\n");
        assert_eq!(
            rewritten("x = s.join(a.join(b)).format(1, k = 2)\n"),
            "x = _cordon_format(_cordon_join(s, _cordon_join(a, b)), 1, k = 2)\n"
        );
        assert_eq!(
            rewritten("x = (s\n  .join (\n l))\n"),
            "x = (_cordon_join(s\n  , \n l))\n"
        );
        assert_eq!(rewritten("x = f(s.upper())\n"), "x = f(s.upper())\n");
        assert_eq!(
            rewritten("x = ('{}' * 2).format(*(['y'] * 2))\n"),
            "x = _cordon_format(('{}' * 2), *(['y'] * 2))\n"
        );
        assert_eq!(
            rewritten("x = l[0].join(m)\n"),
            "x = _cordon_join(l[0], m)\n"
        );
        assert_eq!(
            rewritten("x = s.replace('a', 'b').split(',')\n"),
            "x = _cordon_split(_cordon_replace(s, 'a', 'b'), ',')\n"
        );
    }

    #[test]
    fn constructors_assignments_and_fstrings_are_wrapped() {
        assert_eq!(
            rewritten("x = list(range(3))\n"),
            "x = _cordon_ctor(list, range(3))\n"
        );
        assert_eq!(rewritten("x = tuple()\n"), "x = _cordon_ctor(tuple)\n");
        assert_eq!(
            rewritten("x = str(list(l))\n"),
            "x = _cordon_ctor(str, _cordon_ctor(list, l))\n"
        );
        assert_eq!(rewritten("s += s\n"), "s += _cordon_aug_add(s, s)\n");
        assert_eq!(
            rewritten("d['k'] *= n + 1\n"),
            "d['k'] *= _cordon_aug_mul(d['k'], n + 1)\n"
        );
        assert_eq!(
            rewritten("x += ','.join(l)\n"),
            "x += _cordon_aug_add(x, _cordon_join(',', l))\n"
        );
        assert_eq!(rewritten("n -= 1\n"), "n -= 1\n");
        assert_eq!(
            rewritten("x = f'{a}-{b.join(c)}'\n"),
            "x = f'{_cordon_piece(a)}-{_cordon_piece(_cordon_join(b, c))}'\n"
        );
    }

    #[test]
    fn what_cannot_be_checked_is_refused() {
        for (src, needle) in [
            ("f = ','.join\n", "called directly"),
            ("f = [s.format][0]\n", "called directly"),
            ("f = s.replace\n", "called directly"),
            ("l[f()] += l\n", "compute the index first"),
        ] {
            let e = parse_guarded("t.star", src, &dialect()).unwrap_err();
            assert!(e.to_string().contains(needle), "{src}: {e}");
        }
    }
}
