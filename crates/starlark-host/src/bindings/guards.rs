//! The checked globals behind `eval/size_guards.rs`: `*`, `%`, `join`,
//! `format`, `sorted`, `reversed` and `getattr` refuse, before they
//! allocate, a result larger than the evaluation's heap limit
//! ([`EvalLimits::max_heap_bytes`](crate::EvalLimits::max_heap_bytes));
//! within it they do exactly what the interpreter's own do.

use std::sync::OnceLock;

use starlark::environment::{Globals, GlobalsBuilder};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::list::ListRef;
use starlark::values::tuple::TupleRef;
use starlark::values::{FrozenValue, Value};

use super::{ctx, err};

/// Bytes one element of a list or tuple takes (a pointer).
const ELEMENT_BYTES: u64 = 8;

/// The interpreter's own builtins that the checked ones call, looked up
/// once.
struct Originals {
    sorted: FrozenValue,
    reversed: FrozenValue,
    getattr: FrozenValue,
    /// Keeps the values above alive.
    _globals: Globals,
}

fn originals() -> starlark::Result<&'static Originals> {
    static ORIGINALS: OnceLock<Option<Originals>> = OnceLock::new();
    ORIGINALS
        .get_or_init(|| {
            let globals = Globals::standard();
            let find = |name: &str| globals.iter().find(|(n, _)| *n == name).map(|(_, v)| v);
            Some(Originals {
                sorted: find("sorted")?,
                reversed: find("reversed")?,
                getattr: find("getattr")?,
                _globals: globals.clone(),
            })
        })
        .as_ref()
        .ok_or_else(|| err("internal: the interpreter lacks sorted, reversed or getattr"))
}

/// Refuses formatting `fmt` (each `marker` a slot) with `items` when the
/// result could pass the heap limit.
fn check_formatted(
    eval: &Evaluator,
    what: &str,
    fmt: &str,
    marker: char,
    items: &[Value],
) -> starlark::Result<()> {
    let slots = fmt.matches(marker).count() as u64;
    let limit = ctx(eval)?.max_heap_bytes as u64;
    let bytes =
        (fmt.len() as u64).saturating_add(slots.saturating_mul(longest_piece(items, limit)));
    check(eval, what, bytes)
}

fn as_named<'a, 'v>(kwargs: &'a [(String, Value<'v>)]) -> Vec<(&'a str, Value<'v>)> {
    kwargs.iter().map(|(k, v)| (k.as_str(), *v)).collect()
}

/// Refuses `bytes` over the heap limit, naming `what` would build them.
fn check(eval: &Evaluator, what: &str, bytes: u64) -> starlark::Result<()> {
    let limit = ctx(eval)?.max_heap_bytes as u64;
    if bytes > limit {
        return Err(err(format!(
            "Heap memory limit: {what} would build about {bytes} bytes, more than the \
             {limit}-byte heap limit (EvalLimits::max_heap_bytes)"
        )));
    }
    Ok(())
}

/// Bytes of `v` repeated `n` times, when it is a sequence.
fn repeated_bytes(v: Value, n: Value) -> Option<u64> {
    let n = n.unpack_i32().filter(|n| *n > 0)? as u64;
    let one = if let Some(s) = v.unpack_str() {
        s.len() as u64
    } else if let Some(l) = ListRef::from_value(v) {
        l.len() as u64 * ELEMENT_BYTES
    } else if let Some(t) = TupleRef::from_value(v) {
        t.len() as u64 * ELEMENT_BYTES
    } else {
        return None;
    };
    Some(one.saturating_mul(n))
}

/// The most `str(v)` of one of `items` can add to a formatted string,
/// estimated without building it: a repr could itself be the bomb (`[s] *
/// 1000000` holds a million references to one string).
fn longest_piece(items: &[Value], limit: u64) -> u64 {
    items
        .iter()
        .map(|v| match v.unpack_str() {
            Some(s) => s.len() as u64,
            None => repr_bytes(*v, 0, limit),
        })
        .max()
        .unwrap_or(0)
}

/// Nesting past which a repr is not estimated (and the value refused):
/// the interpreter's own repr recursion overflows the native stack long
/// before a heap limit is reached.
const MAX_REPR_DEPTH: usize = 1000;

/// An upper estimate of `repr(v)`'s length, or more than `limit` (then the
/// walk stops): strings by length, numbers by a bound, containers by their
/// elements plus separators, anything else (functions, ranges) by a small
/// fixed size.
fn repr_bytes(v: Value, depth: usize, limit: u64) -> u64 {
    if depth > MAX_REPR_DEPTH {
        return u64::MAX;
    }
    if let Some(s) = v.unpack_str() {
        return s.len() as u64 * 2 + 2; // escapes at worst double it
    }
    let items: Option<Vec<Value>> = ListRef::from_value(v)
        .map(|l| l.content().to_vec())
        .or_else(|| TupleRef::from_value(v).map(|t| t.content().to_vec()))
        .or_else(|| {
            starlark::values::dict::DictRef::from_value(v)
                .map(|d| d.iter().flat_map(|(k, x)| [k, x]).collect())
        })
        .or_else(|| {
            starlark::values::structs::StructRef::from_value(v)
                .map(|s| s.iter().map(|(_, x)| x).collect())
        });
    match items {
        None if v.get_type() == "int" => v.to_str().len() as u64,
        None => 64,
        Some(items) => {
            let mut total = 2u64;
            for x in items {
                total = total
                    .saturating_add(repr_bytes(x, depth + 1, limit))
                    .saturating_add(2);
                if total > limit {
                    return total;
                }
            }
            total
        }
    }
}

fn positional<'v>(args: Value<'v>) -> Vec<Value<'v>> {
    TupleRef::from_value(args)
        .map(|t| t.content().to_vec())
        .unwrap_or_default()
}

fn named<'v>(kwargs: starlark::values::dict::DictRef<'v>) -> Vec<(String, Value<'v>)> {
    kwargs
        .iter()
        .filter_map(|(k, v)| Some((k.unpack_str()?.to_owned(), v)))
        .collect()
}

fn call_method<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    obj: Value<'v>,
    method: &str,
    args: &[Value<'v>],
    kwargs: &[(String, Value<'v>)],
) -> starlark::Result<Value<'v>> {
    let m = obj.get_attr_error(method, eval.heap())?;
    eval.eval_function(m, args, &as_named(kwargs))
}

#[starlark_module]
pub(super) fn guards(builder: &mut GlobalsBuilder) {
    /// `a * b`, refused when it would repeat a string, list or tuple past
    /// the heap limit.
    fn _cordon_mul<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        if let Some(bytes) = repeated_bytes(a, b).or_else(|| repeated_bytes(b, a)) {
            check(eval, "this `*`", bytes)?;
        }
        a.mul(b, eval.heap())
    }

    /// `a % b`, refused when formatting could build more than the heap limit.
    fn _cordon_mod<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        if let Some(fmt) = a.unpack_str() {
            let items = match TupleRef::from_value(b) {
                Some(t) => t.content().to_vec(),
                None => vec![b],
            };
            check_formatted(eval, "this `%`", fmt, '%', &items)?;
        }
        a.percent(b, eval.heap())
    }

    /// `sep.join(items)`, refused when the joined string would pass the
    /// heap limit.
    fn _cordon_join<'v>(
        #[starlark(require = pos)] obj: Value<'v>,
        #[starlark(args)] args: Value<'v>,
        #[starlark(kwargs)] kwargs: starlark::values::dict::DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let args = positional(args);
        let kwargs = named(kwargs);
        if let (Some(sep), Some(items)) = (obj.unpack_str(), args.first()) {
            let items: Option<Vec<Value>> = ListRef::from_value(*items)
                .map(|l| l.content().to_vec())
                .or_else(|| TupleRef::from_value(*items).map(|t| t.content().to_vec()));
            if let Some(items) = items {
                let n = items.len() as u64;
                let pieces: u64 = items
                    .iter()
                    .map(|v| v.unpack_str().map_or(0, |s| s.len() as u64))
                    .fold(0u64, u64::saturating_add);
                let bytes =
                    pieces.saturating_add((sep.len() as u64).saturating_mul(n.saturating_sub(1)));
                check(eval, "this `join`", bytes)?;
            }
        }
        call_method(eval, obj, "join", &args, &kwargs)
    }

    /// `fmt.format(...)`, refused when the result could pass the heap limit.
    fn _cordon_format<'v>(
        #[starlark(require = pos)] obj: Value<'v>,
        #[starlark(args)] args: Value<'v>,
        #[starlark(kwargs)] kwargs: starlark::values::dict::DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let args = positional(args);
        let kwargs = named(kwargs);
        if let Some(fmt) = obj.unpack_str() {
            let mut items = args.clone();
            items.extend(kwargs.iter().map(|(_, v)| *v));
            check_formatted(eval, "this `format`", fmt, '{', &items)?;
        }
        call_method(eval, obj, "format", &args, &kwargs)
    }

    /// `sorted`, refused for more elements than the heap limit holds.
    fn sorted<'v>(
        #[starlark(require = pos)] x: Value<'v>,
        #[starlark(kwargs)] kwargs: starlark::values::dict::DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        if let Ok(n) = x.length() {
            // The elements and their sort keys.
            check(
                eval,
                "this `sorted`",
                (n.max(0) as u64).saturating_mul(2 * ELEMENT_BYTES),
            )?;
        }
        let kwargs = named(kwargs);
        eval.eval_function(originals()?.sorted.to_value(), &[x], &as_named(&kwargs))
    }

    /// `reversed`, refused for more elements than the heap limit holds.
    fn reversed<'v>(
        #[starlark(require = pos)] x: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        if let Ok(n) = x.length() {
            check(
                eval,
                "this `reversed`",
                (n.max(0) as u64).saturating_mul(ELEMENT_BYTES),
            )?;
        }
        eval.eval_function(originals()?.reversed.to_value(), &[x], &[])
    }

    /// `getattr`, except for the methods that must be called directly so
    /// that their size is checked.
    fn getattr<'v>(
        #[starlark(require = pos)] o: Value<'v>,
        #[starlark(require = pos)] attr: &str,
        #[starlark(require = pos)] default: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        if matches!(attr, "join" | "format") {
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
