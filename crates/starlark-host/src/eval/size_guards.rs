//! Size pre-checks for in-process evaluation: the operators and builtins
//! that can build gigabytes in one step, before the interpreter checks
//! its heap limit again, are routed through checked globals
//! (`bindings/guards.rs`) that refuse a result larger than the heap limit
//! up front.
//!
//! - `*` and `%` become calls of `_cordon_mul` / `_cordon_mod`
//!   (`AstModule::replace_binary_operators`; this also stops the
//!   compiler's constant folding of `'a' * 2000000000`, which allocated
//!   before any limit ran);
//! - `X.join(...)` and `X.format(...)` are rewritten in the source, by the
//!   parsed spans, to `_cordon_join(X, ...)` / `_cordon_format(X, ...)`;
//!   a bare `X.join` or `X.format` (a method taken as a value) is refused
//!   when the package is checked, since it would bypass the check (this
//!   also holds for a struct field named `join` or `format`: it can be
//!   called, not read);
//! - `sorted`, `list`, `tuple`, `reversed` and `getattr` are replaced by
//!   checked versions (`bindings/guards.rs`).
//!
//! This is defence for trusted packages in process, not a boundary: the
//! interpreter has other ways to allocate in one step (`*=` is not an
//! operator node; `str`, `repr`, `print` and f-strings of a value that
//! shares one large string many times). Untrusted packages run in a sandboxed worker, and trusted ones
//! by default in a worker process with rlimits (`Isolation::Process`).

use std::collections::HashMap;

use starlark::syntax::ast::{AstExpr, ExprP};
use starlark::syntax::{AstModule, Dialect};

/// Methods whose result can dwarf their receiver and arguments, and the
/// checked globals that call them.
const METHODS: [(&str, &str); 2] = [("join", "_cordon_join"), ("format", "_cordon_format")];

/// Operators and the checked globals they become.
const OPERATORS: [(&str, &str); 2] = [("*", "_cordon_mul"), ("%", "_cordon_mod")];

/// One change to the source text: insert or replace at a byte range.
struct Edit {
    start: usize,
    end: usize,
    text: String,
    /// Inserts at the same position go outermost first.
    depth: usize,
}

/// Parses `src` as `path` with the guarded methods and operators routed
/// through their checks.
pub(crate) fn parse_guarded(
    path: &str,
    src: &str,
    dialect: &Dialect,
) -> Result<AstModule, starlark::Error> {
    let ast = AstModule::parse(path, src.to_owned(), dialect)?;
    let mut edits = Vec::new();
    let mut refused = None;
    ast.statement()
        .visit_expr(|e| collect(e, src, 0, &mut edits, &mut refused));
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

fn collect(
    e: &AstExpr,
    src: &str,
    depth: usize,
    edits: &mut Vec<Edit>,
    refused: &mut Option<String>,
) {
    match &e.node {
        ExprP::Call(callee, _) => {
            if let ExprP::Dot(obj, name) = &callee.node {
                if let Some(guard) = guard_for(&name.node) {
                    let name_start = name.span.begin().get() as usize;
                    let name_end = name.span.end().get() as usize;
                    // The `.` before the name, across whitespace only.
                    let before = &src[..name_start];
                    let dot = before.trim_end().len().checked_sub(1);
                    let Some(dot) = dot.filter(|d| src.as_bytes()[*d] == b'.') else {
                        *refused = Some(format!("cannot check `.{}` here", name.node));
                        return;
                    };
                    // The receiver's span leaves out its parentheses: as many
                    // `(` before it as there are `)` between it and the dot.
                    let obj_end = obj.span.end().get() as usize;
                    let between = &src[obj_end.min(dot)..dot];
                    if !between.chars().all(|c| c == ')' || c.is_whitespace()) {
                        *refused = Some(format!("cannot check `.{}` here", name.node));
                        return;
                    }
                    let mut obj_start = obj.span.begin().get() as usize;
                    for _ in 0..between.matches(')').count() {
                        let head = src[..obj_start].trim_end();
                        if !head.ends_with('(') {
                            *refused = Some(format!("cannot check `.{}` here", name.node));
                            return;
                        }
                        obj_start = head.len() - 1;
                    }
                    // The `(` after `.name`, across whitespace only.
                    let rest = &src[name_end..];
                    let gap = rest.len() - rest.trim_start().len();
                    if rest[gap..].starts_with('(') {
                        edits.push(Edit {
                            start: obj_start,
                            end: obj_start,
                            text: format!("{guard}("),
                            depth,
                        });
                        // `.name(` becomes `, `, keeping any newlines so
                        // that line numbers stay right.
                        let removed = &src[dot..name_end + gap + 1];
                        let newlines = "\n".repeat(removed.matches('\n').count());
                        edits.push(Edit {
                            start: dot,
                            end: name_end + gap + 1,
                            text: format!(", {newlines}"),
                            depth,
                        });
                        // The receiver and the arguments may hold more.
                        e.visit_expr(|c| {
                            if std::ptr::eq(c, callee.as_ref()) {
                                collect(obj, src, depth + 1, edits, refused)
                            } else {
                                collect(c, src, depth + 1, edits, refused)
                            }
                        });
                        return;
                    }
                    *refused = Some(format!(
                        "`.{}` must be called directly, as `x.{}(...)`",
                        name.node, name.node
                    ));
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
        _ => {}
    }
    e.visit_expr(|c| collect(c, src, depth + 1, edits, refused));
}

/// Applies non-overlapping edits, from the end of the text backwards.
fn apply(src: &str, mut edits: Vec<Edit>) -> String {
    // Later positions first; at one position, replacements before inserts,
    // inner inserts before outer ones (so the outer text ends up first).
    edits.sort_by(|a, b| {
        b.start
            .cmp(&a.start)
            .then((a.end == a.start).cmp(&(b.end == b.start)))
            .then(b.depth.cmp(&a.depth))
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

    fn rewritten(src: &str) -> String {
        let ast = AstModule::parse("t.star", src.to_owned(), &Dialect::Standard).unwrap();
        let mut edits = Vec::new();
        let mut refused = None;
        ast.statement()
            .visit_expr(|e| collect(e, src, 0, &mut edits, &mut refused));
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
    }

    #[test]
    fn a_method_taken_as_a_value_is_refused() {
        for src in ["f = ','.join\n", "f = [s.format][0]\n"] {
            let e = parse_guarded("t.star", src, &Dialect::Standard).unwrap_err();
            assert!(e.to_string().contains("called directly"), "{e}");
        }
    }
}
