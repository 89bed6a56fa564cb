//! The checked globals behind `eval/size_guards.rs`, part one: the size
//! estimates, and the operators (`*`, `%`, `+`, `<<` and their augmented
//! assignments) and methods (`join`, `format`, `replace`, `extend`,
//! `split`, `rsplit`, `splitlines`, `elems`, `codepoints`) that refuse,
//! before they allocate, a
//! result larger than the evaluation's heap limit
//! ([`EvalLimits::max_heap_bytes`](cordon_starlark_protocol::EvalLimits::max_heap_bytes));
//! within it they do exactly what the interpreter's own do. The calls
//! (constructors, `sorted`, `print`, …) are in `guards_calls.rs`.

use cordon_starlark_protocol::LimitKind;
use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::dict::DictRef;
use starlark::values::list::ListRef;
use starlark::values::structs::StructRef;
use starlark::values::tuple::TupleRef;
use starlark::values::{UnpackValue, Value};

use super::ctx;

/// Bytes one element of a list or tuple takes (a pointer).
pub(super) const ELEMENT_BYTES: u64 = 8;

/// Bytes a new string value takes beyond its text (its header).
pub(super) const STRING_BYTES: u64 = 32;

/// The largest int an operation may make: multiplying, shifting or
/// printing one is a single step of the interpreter, which checks neither
/// its deadline nor its heap inside it, and takes seconds beyond this.
pub(super) const MAX_INT_BYTES: u64 = 64 * 1024;

/// The heap limit of this evaluation.
pub(super) fn limit(eval: &Evaluator) -> starlark::Result<u64> {
    Ok(ctx(eval)?.max_heap_bytes as u64)
}

/// Refuses `bytes` more on the heap when they would take it past its
/// limit (what it holds counts, garbage included, as for the
/// interpreter's own limit), naming `what` would build them.
pub(super) fn check(eval: &Evaluator, what: &str, bytes: u64) -> starlark::Result<()> {
    let limit = limit(eval)?;
    let used = eval.heap().allocated_bytes() as u64;
    if bytes.saturating_add(used) > limit {
        return Err(crate::eval::own_limit(
            LimitKind::Heap,
            format!(
                "Heap memory limit: {what} would build about {bytes} bytes, which the heap \
             ({used} bytes in use) cannot take within its {limit}-byte limit \
             (EvalLimits::max_heap_bytes)"
            ),
        ));
    }
    Ok(())
}

/// Refuses an int of `bits` past [`MAX_INT_BYTES`] (or the heap limit).
fn check_int(eval: &Evaluator, what: &str, bits: u64) -> starlark::Result<()> {
    let bytes = bits / 8 + 1;
    check(eval, what, bytes)?;
    if bytes > MAX_INT_BYTES {
        return Err(crate::eval::own_limit(
            LimitKind::Heap,
            format!(
                "Heap memory limit: {what} would make an int of about {bytes} bytes, more than \
             the {MAX_INT_BYTES}-byte cap on ints (one operation on it would run long past \
             the deadline)"
            ),
        ));
    }
    Ok(())
}

/// The bit length of an int value (`None` for anything else).
pub(super) fn int_bits(v: Value) -> Option<u64> {
    if let Some(i) = v.unpack_i32() {
        return Some(u64::from(32 - i.unsigned_abs().leading_zeros()));
    }
    if v.get_type() != "int" {
        return None;
    }
    num_bigint::BigInt::unpack_value(v)
        .ok()
        .flatten()
        .map(|b| b.bits())
}

/// Bytes of a string, or of a list's or tuple's pointers.
pub(super) fn seq_bytes(v: Value) -> Option<u64> {
    if let Some(s) = v.unpack_str() {
        Some(s.len() as u64)
    } else if let Some(l) = ListRef::from_value(v) {
        Some(l.len() as u64 * ELEMENT_BYTES)
    } else {
        TupleRef::from_value(v).map(|t| t.len() as u64 * ELEMENT_BYTES)
    }
}

/// Bytes of `v` repeated `n` times, when it is a sequence.
fn repeated_bytes(v: Value, n: Value) -> Option<u64> {
    let n = n.unpack_i32().filter(|n| *n > 0)? as u64;
    Some(seq_bytes(v)?.saturating_mul(n))
}

/// The most `str(v)` of one of `items` can add to a formatted string,
/// estimated without building it: a repr could itself be the bomb (`[s] *
/// 1000000` holds a million references to one string).
pub(super) fn longest_piece(items: &[Value], limit: u64) -> u64 {
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
/// walk stops): strings by length, ints by their bits, containers by their
/// elements plus separators, anything else (functions, ranges) by a small
/// fixed size.
pub(super) fn repr_bytes(v: Value, depth: usize, limit: u64) -> u64 {
    if depth > MAX_REPR_DEPTH {
        return u64::MAX;
    }
    if let Some(s) = v.unpack_str() {
        return s.len() as u64 * 2 + 2; // escapes at worst double it
    }
    if let Some(bits) = int_bits(v) {
        // Decimal digits: bits * log10(2), rounded up, and a sign.
        return bits * 31 / 100 + 2;
    }
    let items: Option<Vec<Value>> = ListRef::from_value(v)
        .map(|l| l.content().to_vec())
        .or_else(|| TupleRef::from_value(v).map(|t| t.content().to_vec()))
        .or_else(|| DictRef::from_value(v).map(|d| d.iter().flat_map(|(k, x)| [k, x]).collect()))
        .or_else(|| StructRef::from_value(v).map(|s| s.iter().map(|(_, x)| x).collect()));
    match items {
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
    let limit = limit(eval)?;
    let bytes =
        (fmt.len() as u64).saturating_add(slots.saturating_mul(longest_piece(items, limit)));
    check(eval, what, bytes)
}

fn check_add(eval: &Evaluator, a: Value, b: Value) -> starlark::Result<()> {
    if let (Some(x), Some(y)) = (seq_bytes(a), seq_bytes(b)) {
        check(eval, "this `+`", x.saturating_add(y))?;
    } else if ListRef::from_value(a).is_some() {
        // `l += iterable` extends a list by the iterable's length.
        if let Ok(n) = b.length() {
            let bytes = (ListRef::from_value(a).map_or(0, |l| l.len()) as u64)
                .saturating_add(n.max(0) as u64)
                .saturating_mul(ELEMENT_BYTES);
            check(eval, "this `+=`", bytes)?;
        }
    }
    Ok(())
}

fn check_mul(eval: &Evaluator, a: Value, b: Value) -> starlark::Result<()> {
    if let Some(bytes) = repeated_bytes(a, b).or_else(|| repeated_bytes(b, a)) {
        check(eval, "this `*`", bytes)?;
    } else if let (Some(x), Some(y)) = (int_bits(a), int_bits(b)) {
        check_int(eval, "this `*`", x.saturating_add(y))?;
    }
    Ok(())
}

fn check_mod(eval: &Evaluator, a: Value, b: Value) -> starlark::Result<()> {
    if let Some(fmt) = a.unpack_str() {
        let items = match TupleRef::from_value(b) {
            Some(t) => t.content().to_vec(),
            None => vec![b],
        };
        check_formatted(eval, "this `%`", fmt, '%', &items)?;
    }
    Ok(())
}

fn check_shl(eval: &Evaluator, a: Value, b: Value) -> starlark::Result<()> {
    if let (Some(x), Some(n)) = (int_bits(a), b.unpack_i32()) {
        check_int(eval, "this `<<`", x.saturating_add(n.max(0) as u64))?;
    }
    Ok(())
}

pub(super) fn positional<'v>(args: Value<'v>) -> Vec<Value<'v>> {
    TupleRef::from_value(args)
        .map(|t| t.content().to_vec())
        .unwrap_or_default()
}

pub(super) fn named<'v>(kwargs: DictRef<'v>) -> Vec<(String, Value<'v>)> {
    kwargs
        .iter()
        .filter_map(|(k, v)| Some((k.unpack_str()?.to_owned(), v)))
        .collect()
}

pub(super) fn as_named<'a, 'v>(kwargs: &'a [(String, Value<'v>)]) -> Vec<(&'a str, Value<'v>)> {
    kwargs.iter().map(|(k, v)| (k.as_str(), *v)).collect()
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

/// The argument `name` (positional at `i`, or by name), if given.
fn arg<'v>(
    args: &[Value<'v>],
    kwargs: &[(String, Value<'v>)],
    i: usize,
    name: &str,
) -> Option<Value<'v>> {
    args.get(i)
        .copied()
        .or_else(|| kwargs.iter().find(|(k, _)| k == name).map(|(_, v)| *v))
}

/// Pieces `s.split(sep)` (or on whitespace) makes, at most `max + 1`.
fn pieces(s: &str, sep: Option<&str>, max: Option<i32>) -> u64 {
    let n = match sep {
        Some(sep) if !sep.is_empty() => s.matches(sep).count() as u64 + 1,
        _ => s.split_whitespace().count() as u64,
    };
    match max {
        Some(m) if m >= 0 => n.min(m as u64 + 1),
        _ => n,
    }
}

fn check_split(eval: &Evaluator, what: &str, s: &str, n: u64) -> starlark::Result<()> {
    let bytes = n
        .saturating_mul(ELEMENT_BYTES + STRING_BYTES)
        .saturating_add(s.len() as u64);
    check(eval, what, bytes)
}

#[starlark_module]
pub(super) fn guards(builder: &mut GlobalsBuilder) {
    /// `a * b`, refused when it would repeat a string, list or tuple past
    /// the heap limit, or make an int past the cap on ints.
    fn _cordon_mul<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        check_mul(eval, a, b)?;
        a.mul(b, eval.heap())
    }

    /// `a % b`, refused when formatting could build more than the heap limit.
    fn _cordon_mod<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        check_mod(eval, a, b)?;
        a.percent(b, eval.heap())
    }

    /// `a + b`, refused when it would join strings, lists or tuples past
    /// the heap limit (`s = s + s` doubles in one step).
    fn _cordon_add<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        check_add(eval, a, b)?;
        a.add(b, eval.heap())
    }

    /// `a << b`, refused when it would make an int past the cap on ints.
    fn _cordon_shl<'v>(
        #[starlark(require = pos)] a: Value<'v>,
        #[starlark(require = pos)] b: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        check_shl(eval, a, b)?;
        a.left_shift(b, eval.heap())
    }

    /// `target += value`'s check: `value`, once `target + value` is known
    /// to fit (the assignment then runs as the interpreter's own).
    fn _cordon_aug_add<'v>(
        #[starlark(require = pos)] target: Value<'v>,
        #[starlark(require = pos)] value: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        check_add(eval, target, value)?;
        Ok(value)
    }

    /// `target *= value`'s check.
    fn _cordon_aug_mul<'v>(
        #[starlark(require = pos)] target: Value<'v>,
        #[starlark(require = pos)] value: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        check_mul(eval, target, value)?;
        Ok(value)
    }

    /// `target %= value`'s check.
    fn _cordon_aug_mod<'v>(
        #[starlark(require = pos)] target: Value<'v>,
        #[starlark(require = pos)] value: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        check_mod(eval, target, value)?;
        Ok(value)
    }

    /// `target <<= value`'s check.
    fn _cordon_aug_shl<'v>(
        #[starlark(require = pos)] target: Value<'v>,
        #[starlark(require = pos)] value: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        check_shl(eval, target, value)?;
        Ok(value)
    }

    /// `sep.join(items)`, refused when the joined string would pass the
    /// heap limit.
    fn _cordon_join<'v>(
        #[starlark(require = pos)] obj: Value<'v>,
        #[starlark(args)] args: Value<'v>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
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
        #[starlark(kwargs)] kwargs: DictRef<'v>,
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

    /// `s.replace(old, new[, count])`, refused when the result would pass
    /// the heap limit (each pass of `s = s.replace('x', 'xxxxxxxx')`
    /// multiplies it).
    fn _cordon_replace<'v>(
        #[starlark(require = pos)] obj: Value<'v>,
        #[starlark(args)] args: Value<'v>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let args = positional(args);
        let kwargs = named(kwargs);
        let strs = (
            obj.unpack_str(),
            arg(&args, &kwargs, 0, "old").and_then(|v| v.unpack_str()),
            arg(&args, &kwargs, 1, "new").and_then(|v| v.unpack_str()),
        );
        if let (Some(s), Some(old), Some(new)) = strs {
            let mut n = if old.is_empty() {
                s.chars().count() as u64 + 1
            } else {
                s.matches(old).count() as u64
            };
            if let Some(c) = arg(&args, &kwargs, 2, "count").and_then(|v| v.unpack_i32()) {
                if c >= 0 {
                    n = n.min(c as u64);
                }
            }
            let bytes = (s.len() as u64)
                .saturating_sub(n.saturating_mul(old.len() as u64))
                .saturating_add(n.saturating_mul(new.len() as u64));
            check(eval, "this `replace`", bytes)?;
        }
        call_method(eval, obj, "replace", &args, &kwargs)
    }

    /// `l.extend(x)`, refused when the list would pass the heap limit
    /// (`l.extend(l)` doubles it).
    fn _cordon_extend<'v>(
        #[starlark(require = pos)] obj: Value<'v>,
        #[starlark(args)] args: Value<'v>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let args = positional(args);
        let kwargs = named(kwargs);
        if let (Some(l), Some(x)) = (ListRef::from_value(obj), args.first()) {
            if let Ok(n) = x.length() {
                let bytes = (l.len() as u64)
                    .saturating_add(n.max(0) as u64)
                    .saturating_mul(ELEMENT_BYTES);
                check(eval, "this `extend`", bytes)?;
            }
        }
        call_method(eval, obj, "extend", &args, &kwargs)
    }

    /// `s.split(...)`, refused when its pieces would pass the heap limit
    /// (each is a string of its own).
    fn _cordon_split<'v>(
        #[starlark(require = pos)] obj: Value<'v>,
        #[starlark(args)] args: Value<'v>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let args = positional(args);
        let kwargs = named(kwargs);
        if let Some(s) = obj.unpack_str() {
            let sep = arg(&args, &kwargs, 0, "sep").and_then(|v| v.unpack_str());
            let max = arg(&args, &kwargs, 1, "maxsplit").and_then(|v| v.unpack_i32());
            check_split(eval, "this `split`", s, pieces(s, sep, max))?;
        }
        call_method(eval, obj, "split", &args, &kwargs)
    }

    /// `s.rsplit(...)`, checked as `split`.
    fn _cordon_rsplit<'v>(
        #[starlark(require = pos)] obj: Value<'v>,
        #[starlark(args)] args: Value<'v>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let args = positional(args);
        let kwargs = named(kwargs);
        if let Some(s) = obj.unpack_str() {
            let sep = arg(&args, &kwargs, 0, "sep").and_then(|v| v.unpack_str());
            let max = arg(&args, &kwargs, 1, "maxsplit").and_then(|v| v.unpack_i32());
            check_split(eval, "this `rsplit`", s, pieces(s, sep, max))?;
        }
        call_method(eval, obj, "rsplit", &args, &kwargs)
    }

    /// `s.splitlines(...)`, checked as `split`.
    fn _cordon_splitlines<'v>(
        #[starlark(require = pos)] obj: Value<'v>,
        #[starlark(args)] args: Value<'v>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let args = positional(args);
        let kwargs = named(kwargs);
        if let Some(s) = obj.unpack_str() {
            let n = s.matches('\n').count() as u64 + 1;
            check_split(eval, "this `splitlines`", s, n)?;
        }
        call_method(eval, obj, "splitlines", &args, &kwargs)
    }

    /// `s.elems()`: its iterator is collected whole on first use, one
    /// string a character; refused when that would pass the heap limit.
    fn _cordon_elems<'v>(
        #[starlark(require = pos)] obj: Value<'v>,
        #[starlark(args)] args: Value<'v>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let args = positional(args);
        let kwargs = named(kwargs);
        if let Some(s) = obj.unpack_str() {
            let n = s.chars().count() as u64;
            check(
                eval,
                "this `elems`",
                n.saturating_mul(ELEMENT_BYTES + STRING_BYTES),
            )?;
        }
        call_method(eval, obj, "elems", &args, &kwargs)
    }

    /// `s.codepoints()`: collected whole on first use like `elems`.
    fn _cordon_codepoints<'v>(
        #[starlark(require = pos)] obj: Value<'v>,
        #[starlark(args)] args: Value<'v>,
        #[starlark(kwargs)] kwargs: DictRef<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let args = positional(args);
        let kwargs = named(kwargs);
        if let Some(s) = obj.unpack_str() {
            let n = s.chars().count() as u64;
            check(
                eval,
                "this `codepoints`",
                n.saturating_mul(2 * ELEMENT_BYTES),
            )?;
        }
        call_method(eval, obj, "codepoints", &args, &kwargs)
    }
}
