//! The checked globals behind `eval/size_guards.rs`, part two: calls whose
//! result can dwarf their arguments — the constructors `list`, `tuple`,
//! `str` and `int` (through `_cordon_ctor`), `sorted`, `reversed`,
//! `enumerate`, `zip`, the text of a value (`repr`, `print`, `fail`,
//! f-string pieces) — refused before they allocate past the heap limit,
//! and `getattr` of the methods that must be called directly. An iterable
//! of unknown length is collected here, one element at a time within the
//! limit, and handed to the interpreter's own as a list.

use cordon_starlark_protocol::LimitKind;
use std::sync::OnceLock;

use starlark::environment::{Globals, GlobalsBuilder, LibraryExtension};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::dict::DictRef;
use starlark::values::list::AllocList;
use starlark::values::{FrozenValue, Value};

use super::err;
use super::guards::{
    as_named, check, limit, named, positional, repr_bytes, ELEMENT_BYTES, MAX_INT_BYTES,
};

/// Bytes of one pair (`enumerate`'s, `zip`'s of two): a tuple's header and
/// two pointers, and its pointer in the list.
const PAIR_BYTES: u64 = 40;

/// The interpreter's own builtins that the checked ones call, looked up
/// once.
struct Originals {
    sorted: FrozenValue,
    reversed: FrozenValue,
    getattr: FrozenValue,
    enumerate: FrozenValue,
    zip: FrozenValue,
    repr: FrozenValue,
    fail: FrozenValue,
    print: FrozenValue,
    /// Keeps the values above alive.
    _globals: Globals,
}

fn originals() -> starlark::Result<&'static Originals> {
    static ORIGINALS: OnceLock<Option<Originals>> = OnceLock::new();
    ORIGINALS
        .get_or_init(|| {
            let globals = Globals::extended_by(&[LibraryExtension::Print]);
            let find = |name: &str| globals.iter().find(|(n, _)| *n == name).map(|(_, v)| v);
            Some(Originals {
                sorted: find("sorted")?,
                reversed: find("reversed")?,
                getattr: find("getattr")?,
                enumerate: find("enumerate")?,
                zip: find("zip")?,
                repr: find("repr")?,
                fail: find("fail")?,
                print: find("print")?,
                _globals: globals.clone(),
            })
        })
        .as_ref()
        .ok_or_else(|| err("internal: the interpreter lacks a builtin the size checks wrap"))
}

/// `x`'s length if it has one; otherwise its elements, collected within
/// the heap limit (`per` bytes each), as a list the interpreter's own
/// builtin is then given instead.
fn sized<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    what: &str,
    x: Value<'v>,
    per: u64,
) -> starlark::Result<Value<'v>> {
    if let Ok(n) = x.length() {
        check(eval, what, (n.max(0) as u64).saturating_mul(per))?;
        return Ok(x);
    }
    let Ok(iter) = x.iterate(eval.heap()) else {
        // Not iterable: the interpreter's own says so.
        return Ok(x);
    };
    let limit = limit(eval)?;
    let heap = eval.heap();
    let mut items = Vec::new();
    for v in iter {
        items.push(v);
        // The elements may be new values themselves (`s.elems()` makes a
        // string each): what the heap holds counts too, checked every so
        // often as it grows.
        if items.len() % 1024 == 0 {
            let bytes = (items.len() as u64).saturating_mul(per.max(ELEMENT_BYTES));
            if bytes.saturating_add(heap.allocated_bytes() as u64) > limit {
                return Err(crate::eval::own_limit(
                    LimitKind::Heap,
                    format!(
                        "Heap memory limit: {what} would build more than the {limit}-byte heap \
                     limit allows (EvalLimits::max_heap_bytes)"
                    ),
                ));
            }
        }
    }
    Ok(eval.heap().alloc(AllocList(items)))
}

/// Refuses a value whose text (`str`/`repr`) would pass the heap limit.
fn check_text(eval: &Evaluator, what: &str, items: &[Value]) -> starlark::Result<()> {
    let limit = limit(eval)?;
    let bytes = items
        .iter()
        .map(|v| match v.unpack_str() {
            Some(s) => s.len() as u64,
            None => repr_bytes(*v, 0, limit),
        })
        .fold(0u64, u64::saturating_add);
    if bytes == u64::MAX {
        return Err(crate::eval::own_limit(
            LimitKind::Nesting,
            format!(
                "nesting limit: {what} would print a value nested too deeply to print (the \
             interpreter's own printing would overflow its native stack)"
            ),
        ));
    }
    check(eval, what, bytes)
}

/// The name of a builtin function (`list` for the builtin list; a `def`
/// prints as `file.star.name`, so none of theirs is taken for one).
fn builtin_name(f: Value) -> Option<String> {
    (f.get_type() == "function").then(|| f.to_str())
}

#[starlark_module]
pub(super) fn guard_calls(builder: &mut GlobalsBuilder) {
    /// `f(...)` where the package wrote `list(...)`, `tuple(...)`,
    /// `str(...)` or `int(...)`: when `f` is that builtin, its result is
    /// checked first; any other `f` (a package's own `list`) is just
    /// called.
    fn _cordon_ctor<'v>(
        #[starlark(require = pos)] f: Value<'v>,
        #[starlark(args)] args: Value<'v>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let mut args = positional(args);
        let kwargs = named(kwargs);
        match (builtin_name(f).as_deref(), args.first().copied()) {
            (Some(name @ ("list" | "tuple")), Some(x)) => {
                args[0] = sized(eval, &format!("this `{name}`"), x, ELEMENT_BYTES)?;
            }
            (Some("str"), Some(x)) if x.unpack_str().is_none() => {
                check_text(eval, "this `str`", &[x])?;
            }
            (Some("int"), Some(x)) => {
                if let Some(s) = x.unpack_str() {
                    // Decimal digits a MAX_INT_BYTES int has, and a sign.
                    if s.len() as u64 > MAX_INT_BYTES * 5 / 2 + 2 {
                        return Err(crate::eval::own_limit(
                            LimitKind::Heap,
                            format!(
                                "Heap memory limit: int() of a {}-character string would make an \
                             int past the {MAX_INT_BYTES}-byte cap on ints",
                                s.len()
                            ),
                        ));
                    }
                }
            }
            _ => {}
        }
        eval.eval_function(f, &args, &as_named(&kwargs))
    }

    /// An f-string's piece: `x`, once its text is known to fit.
    fn _cordon_piece<'v>(
        #[starlark(require = pos)] x: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        check_text(eval, "this f-string", &[x])?;
        Ok(x)
    }

    /// `sorted`, refused for more elements than the heap limit holds.
    fn sorted<'v>(
        #[starlark(require = pos)] x: Value<'v>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        // The elements and their sort keys.
        let x = sized(eval, "this `sorted`", x, 2 * ELEMENT_BYTES)?;
        let kwargs = named(kwargs);
        eval.eval_function(originals()?.sorted.to_value(), &[x], &as_named(&kwargs))
    }

    /// `reversed`, refused for more elements than the heap limit holds.
    fn reversed<'v>(
        #[starlark(require = pos)] x: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let x = sized(eval, "this `reversed`", x, ELEMENT_BYTES)?;
        eval.eval_function(originals()?.reversed.to_value(), &[x], &[])
    }

    /// `enumerate`, refused when its pairs would pass the heap limit.
    fn enumerate<'v>(
        #[starlark(require = pos)] x: Value<'v>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let x = sized(eval, "this `enumerate`", x, PAIR_BYTES)?;
        let kwargs = named(kwargs);
        eval.eval_function(originals()?.enumerate.to_value(), &[x], &as_named(&kwargs))
    }

    /// `zip`, refused when its tuples would pass the heap limit.
    fn zip<'v>(
        #[starlark(args)] args: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let mut args = positional(args);
        let per = ELEMENT_BYTES * (2 + args.len() as u64);
        for a in args.iter_mut() {
            *a = sized(eval, "this `zip`", *a, per)?;
        }
        eval.eval_function(originals()?.zip.to_value(), &args, &[])
    }

    /// `repr`, refused when the text would pass the heap limit.
    fn repr<'v>(
        #[starlark(require = pos)] x: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        check_text(eval, "this `repr`", &[x])?;
        eval.eval_function(originals()?.repr.to_value(), &[x], &[])
    }

    /// `print`, refused when its text would pass the heap limit (it is
    /// built whole before the output cap sees it).
    fn print<'v>(
        #[starlark(args)] args: Value<'v>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let args = positional(args);
        let kwargs = named(kwargs);
        check_text(eval, "this `print`", &args)?;
        eval.eval_function(originals()?.print.to_value(), &args, &as_named(&kwargs))
    }

    /// `fail`, refused (with its own error) when its message would pass
    /// the heap limit.
    fn fail<'v>(
        #[starlark(args)] args: Value<'v>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let args = positional(args);
        let kwargs = named(kwargs);
        check_text(eval, "this `fail`", &args)?;
        eval.eval_function(originals()?.fail.to_value(), &args, &as_named(&kwargs))
    }

    /// `getattr`, except for the methods that must be called directly so
    /// that their size is checked.
    fn getattr<'v>(
        #[starlark(require = pos)] o: Value<'v>,
        #[starlark(require = pos)] attr: &str,
        #[starlark(require = pos)] default: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        if crate::eval::GUARDED_METHODS.iter().any(|(m, _)| *m == attr) {
            return Err(err(format!(
                "getattr(x, {attr:?}): `.{attr}` may only be called directly (`x.{attr}(...)`)"
            )));
        }
        let attr_value = eval.heap().alloc(attr);
        let mut args = vec![o, attr_value];
        args.extend(default);
        eval.eval_function(originals()?.getattr.to_value(), &args, &[])
    }
}
