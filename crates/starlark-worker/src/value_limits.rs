//! The checks that hold an evaluation to its [`EvalLimits`] outside the
//! interpreter's own: the pre-parse source-shape scanner, and the depth-
//! and size-limited conversions between Starlark values and JSON.
//!
//! [`EvalLimits`]: cordon_starlark_protocol::EvalLimits

use starlark::values::dict::DictRef;
use starlark::values::float::StarlarkFloat;
use starlark::values::list::ListRef;
use starlark::values::structs::StructRef;
use starlark::values::tuple::TupleRef;
use starlark::values::{Heap, UnpackValue, Value};

/// Why source was refused by [`check_source_shape`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShapeError {
    /// Brackets nest deeper than allowed: (depth, line).
    Nesting(usize, usize),
    /// An operator chain would build a syntax tree deeper than allowed:
    /// (estimated depth, line).
    ExpressionDepth(usize, usize),
}

const LAMBDA_WEIGHT: usize = 10;

/// Deepest bracket nesting of Starlark source, ignoring strings and
/// comments. Returns `Err((depth, line))` as soon as `max` is exceeded.
/// (The scanner's bracket half alone, for its tests.)
#[cfg(test)]
fn check_nesting(src: &str, max: usize) -> Result<usize, (usize, usize)> {
    match check_source_shape(src, max, usize::MAX) {
        Ok(d) => Ok(d),
        Err(ShapeError::Nesting(d, l)) => Err((d, l)),
        Err(ShapeError::ExpressionDepth(..)) => unreachable!("expression depth is unlimited here"),
    }
}

/// Pre-parse scan that bounds how deep the parser and compiler will
/// recurse. Skips strings and comments, and checks
/// * bracket nesting (`max_nesting`), and
/// * an estimate of expression-tree depth (`max_expr_depth`): operators,
///   `not`/`and`/`or`/`if`/`else`/`in`/`is`, attribute access and postfix
///   calls/subscripts each add one along the current bracket path
///   (`lambda` adds ten); `,` starts a sibling, a closing bracket returns
///   to the depth at its opening, a newline or `;` outside brackets ends
///   the statement. Long chains such as `1 + 1 + ... + 1` or `- - - x`
///   otherwise overflow the native stack in the interpreter.
///
/// Returns the deepest bracket nesting seen.
pub fn check_source_shape(
    src: &str,
    max_nesting: usize,
    max_expr_depth: usize,
) -> Result<usize, ShapeError> {
    let b = src.as_bytes();
    let mut i = 0;
    let mut deepest = 0usize;
    let mut line = 1usize;
    // Expression depth at each open bracket; `cur` is the running estimate.
    let mut stack: Vec<usize> = Vec::new();
    let mut cur = 0usize;
    // Last significant byte, to tell postfix `(`/`[` from grouping ones.
    let mut prev: u8 = b'\n';
    let is_op = |c: u8| {
        matches!(
            c,
            b'+' | b'-'
                | b'*'
                | b'/'
                | b'%'
                | b'&'
                | b'|'
                | b'^'
                | b'~'
                | b'<'
                | b'>'
                | b'='
                | b'!'
        )
    };
    let bump = |cur: &mut usize, n: usize, line: usize| -> Result<(), ShapeError> {
        *cur += n;
        if *cur > max_expr_depth {
            Err(ShapeError::ExpressionDepth(*cur, line))
        } else {
            Ok(())
        }
    };
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                line += 1;
                if stack.is_empty() {
                    cur = 0;
                }
            }
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'\'' | b'"' => {
                let q = c;
                let triple = i + 2 < b.len() && b[i + 1] == q && b[i + 2] == q;
                i += if triple { 3 } else { 1 };
                while i < b.len() {
                    match b[i] {
                        b'\\' => {
                            if i + 1 < b.len() && b[i + 1] == b'\n' {
                                line += 1;
                            }
                            i += 2;
                            continue;
                        }
                        b'\n' => {
                            line += 1;
                            if !triple {
                                break; // unterminated; the parser reports it
                            }
                        }
                        x if x == q => {
                            if !triple {
                                break;
                            }
                            if i + 2 < b.len() && b[i + 1] == q && b[i + 2] == q {
                                i += 2;
                                break;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                prev = b'"';
                i += 1;
                continue;
            }
            b'(' | b'[' | b'{' => {
                if c != b'{'
                    && (prev.is_ascii_alphanumeric() || matches!(prev, b'_' | b')' | b']' | b'"'))
                {
                    bump(&mut cur, 1, line)?;
                }
                stack.push(cur);
                if stack.len() > max_nesting {
                    return Err(ShapeError::Nesting(stack.len(), line));
                }
                deepest = deepest.max(stack.len());
            }
            b')' | b']' | b'}' => {
                if let Some(base) = stack.pop() {
                    cur = base;
                }
            }
            b',' => cur = stack.last().copied().unwrap_or(0),
            b';' if stack.is_empty() => cur = 0,
            b'.' if i + 1 < b.len() && (b[i + 1].is_ascii_alphabetic() || b[i + 1] == b'_') => {
                bump(&mut cur, 1, line)?;
            }
            c if is_op(c) => {
                // Second half of `<=`, `==`, `+=`, `//`, `**`, `<<`, `>>`
                // is the same token; everything else (e.g. `- -`) counts.
                let continues = (c == b'=' && is_op(prev) && i > 0 && is_op(b[i - 1]))
                    || (c == prev
                        && i > 0
                        && b[i - 1] == c
                        && matches!(c, b'/' | b'*' | b'<' | b'>'));
                if !continues {
                    bump(&mut cur, 1, line)?;
                }
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                match &b[start..i] {
                    b"not" | b"and" | b"or" | b"if" | b"else" | b"in" | b"is" => {
                        bump(&mut cur, 1, line)?
                    }
                    b"lambda" => bump(&mut cur, LAMBDA_WEIGHT, line)?,
                    _ => {}
                }
                prev = b'a';
                continue;
            }
            _ => {}
        }
        if !c.is_ascii_whitespace() {
            prev = c;
        }
        i += 1;
    }
    Ok(deepest)
}

/// Depth- and size-limited conversion of a Starlark value to JSON. Never
/// recurses deeper than `max_depth` (self-referencing lists are caught by
/// the depth limit). Functions and other opaque values are errors.
pub fn value_to_json(
    v: Value,
    max_depth: usize,
    max_bytes: usize,
) -> Result<serde_json::Value, JsonError> {
    let mut budget = max_bytes;
    to_json_inner(v, max_depth, &mut budget, max_bytes)
}

/// Why a value did not cross the JSON boundary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// Deeper or larger than the limits allow.
    #[error("{0}")]
    TooLarge(String),
    /// Of a type, or a value, that JSON cannot represent.
    #[error("{0}")]
    NotJson(String),
}

fn charge(budget: &mut usize, n: usize, max: usize) -> Result<(), JsonError> {
    *budget = budget
        .checked_sub(n)
        .ok_or_else(|| JsonError::TooLarge(format!("value is larger than {max} bytes as JSON")))?;
    Ok(())
}

fn to_json_inner(
    v: Value,
    depth: usize,
    budget: &mut usize,
    max: usize,
) -> Result<serde_json::Value, JsonError> {
    use serde_json::Value as J;
    let not_json = JsonError::NotJson;
    charge(budget, 8, max)?;
    if v.is_none() {
        return Ok(J::Null);
    }
    if let Some(b) = v.unpack_bool() {
        return Ok(J::Bool(b));
    }
    if let Some(s) = v.unpack_str() {
        charge(budget, s.len(), max)?;
        return Ok(J::String(s.to_owned()));
    }
    match v.get_type() {
        "int" => {
            if let Ok(Some(i)) = i64::unpack_value(v) {
                return Ok(J::Number(i.into()));
            }
            // Exact, any size: serde_json keeps a number's digits
            // (`arbitrary_precision`, which starlark turns on).
            let big = num_bigint::BigInt::unpack_value(v)
                .ok()
                .flatten()
                .ok_or_else(|| not_json("an int that is not an integer".to_owned()))?;
            if big.bits() > MAX_INT_BITS {
                return Err(JsonError::TooLarge(format!(
                    "an int of {} bits is larger than the {MAX_INT_BITS} bits (about \
                     {MAX_INT_DIGITS} digits) that cross the JSON boundary",
                    big.bits()
                )));
            }
            let digits = big.to_string();
            charge(budget, digits.len(), max)?;
            return digits
                .parse::<serde_json::Number>()
                .map(J::Number)
                .map_err(|e| not_json(format!("int {digits} has no JSON form: {e}")));
        }
        "float" => {
            let f = StarlarkFloat::unpack_value(v)
                .ok()
                .flatten()
                .map(|f| f.0)
                .ok_or_else(|| not_json("bad float".to_owned()))?;
            return serde_json::Number::from_f64(f)
                .map(J::Number)
                .ok_or_else(|| not_json(format!("float {f} has no JSON form ({JSON_TYPES})")));
        }
        _ => {}
    }
    if depth == 0 {
        return Err(JsonError::TooLarge(
            "value is nested too deeply to convert to JSON".to_owned(),
        ));
    }
    if let Some(l) = ListRef::from_value(v) {
        return l
            .iter()
            .map(|x| to_json_inner(x, depth - 1, budget, max))
            .collect::<Result<Vec<_>, _>>()
            .map(J::Array);
    }
    if let Some(t) = TupleRef::from_value(v) {
        return t
            .iter()
            .map(|x| to_json_inner(x, depth - 1, budget, max))
            .collect::<Result<Vec<_>, _>>()
            .map(J::Array);
    }
    if let Some(d) = DictRef::from_value(v) {
        let mut m = serde_json::Map::new();
        for (k, x) in d.iter() {
            let k = k.unpack_str().ok_or_else(|| {
                not_json(format!(
                    "dict key of type {} is not a string ({JSON_TYPES})",
                    k.get_type()
                ))
            })?;
            charge(budget, k.len(), max)?;
            m.insert(k.to_owned(), to_json_inner(x, depth - 1, budget, max)?);
        }
        return Ok(J::Object(m));
    }
    if let Some(s) = StructRef::from_value(v) {
        let mut m = serde_json::Map::new();
        for (k, x) in s.iter() {
            charge(budget, k.as_str().len(), max)?;
            m.insert(
                k.as_str().to_owned(),
                to_json_inner(x, depth - 1, budget, max)?,
            );
        }
        return Ok(J::Object(m));
    }
    Err(not_json(format!(
        "a value of type {} cannot be converted to JSON ({JSON_TYPES})",
        v.get_type()
    )))
}

/// What crosses the JSON boundary (entry-point arguments and return
/// values, `http` JSON bodies), for error messages.
pub const JSON_TYPES: &str = "accepted: None, bool, int, float (finite), string, \
    list, tuple, dict with string keys, struct, nested within the depth and size limits";

/// The largest int that crosses the JSON boundary either way, in decimal
/// digits: converting a longer one costs time quadratic in its length,
/// outside the interpreter's limits (Python draws the line at 4300).
pub const MAX_INT_DIGITS: usize = 4300;
const MAX_INT_BITS: u64 = 14_300; // > 4300 * log2(10) = 14284.3

/// Depth-limited conversion of JSON into a Starlark value on `heap`.
pub fn json_to_value<'v>(
    heap: Heap<'v>,
    j: &serde_json::Value,
    max_depth: usize,
) -> Result<Value<'v>, String> {
    use serde_json::Value as J;
    Ok(match j {
        J::Null => Value::new_none(),
        J::Bool(b) => Value::new_bool(*b),
        J::Number(n) => {
            let text = n.to_string();
            let integer = !text.contains(['.', 'e', 'E']);
            if let Some(i) = n.as_i64() {
                heap.alloc(i)
            } else if integer {
                let digits = text.trim_start_matches('-').len();
                if digits > MAX_INT_DIGITS {
                    return Err(format!(
                        "an integer of {digits} digits is longer than the {MAX_INT_DIGITS} \
                         digits that cross the JSON boundary"
                    ));
                }
                let big: num_bigint::BigInt = text
                    .parse()
                    .map_err(|e| format!("integer {text} is not valid: {e}"))?;
                heap.alloc(big)
            } else if let Some(f) = n.as_f64() {
                if !f.is_finite() {
                    return Err(format!("number {n} is out of range"));
                }
                heap.alloc(f)
            } else {
                return Err(format!("number {n} is out of range"));
            }
        }
        J::String(s) => heap.alloc(s.as_str()),
        J::Array(a) => {
            if max_depth == 0 {
                return Err("JSON is nested too deeply".to_owned());
            }
            let items = a
                .iter()
                .map(|x| json_to_value(heap, x, max_depth - 1))
                .collect::<Result<Vec<_>, _>>()?;
            heap.alloc(items)
        }
        J::Object(o) => {
            if max_depth == 0 {
                return Err("JSON is nested too deeply".to_owned());
            }
            let mut items = Vec::with_capacity(o.len());
            for (k, x) in o {
                items.push((k.as_str(), json_to_value(heap, x, max_depth - 1)?));
            }
            heap.alloc(starlark::values::dict::AllocDict(items))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_scanner_skips_strings_and_comments() {
        assert_eq!(check_nesting("f([{}])", 10), Ok(3));
        assert_eq!(
            check_nesting("x = '((((((' # ((((((\ny = \"\"\"[[[[\n[[[\"\"\"", 2),
            Ok(0)
        );
        assert_eq!(check_nesting("x = 'a\\'(' + (1)", 5), Ok(1));
        assert_eq!(check_nesting(&"(".repeat(100), 64), Err((65, 1)));
        assert_eq!(check_nesting("\n\n[[[", 2), Err((3, 3)));
    }

    #[test]
    fn expression_depth_estimate() {
        let chain = |n: usize, op: &str| format!("x = {}1\n", op.repeat(n));
        assert!(check_source_shape(&chain(100, "1 + "), 64, 200).is_ok());
        assert_eq!(
            check_source_shape(&chain(300, "1 + "), 64, 200),
            Err(ShapeError::ExpressionDepth(201, 1))
        );
        assert!(check_source_shape(&chain(300, "-"), 64, 200).is_err());
        assert!(check_source_shape(&chain(300, "not "), 64, 200).is_err());
        assert!(check_source_shape(&chain(30, "lambda: "), 64, 200).is_err());
        assert!(
            check_source_shape(&format!("x = 'a'{}\n", ".upper()".repeat(300)), 64, 200).is_err()
        );
        // Flat data is fine however long: commas start siblings, statements reset.
        let list = format!("x = [{}]\n", "-1, ".repeat(10_000));
        assert!(check_source_shape(&list, 64, 200).is_ok());
        let many = "y = 1 + 2 + 3\n".repeat(10_000);
        assert!(check_source_shape(&many, 64, 200).is_ok());
        let tuples = format!("x = [{}]\n", "(1, 2), ".repeat(10_000));
        assert!(check_source_shape(&tuples, 64, 200).is_ok());
        // Operators inside strings and comments do not count.
        let s = format!("x = '{}' # {}\n", "+".repeat(1000), "-".repeat(1000));
        assert!(check_source_shape(&s, 64, 10).is_ok());
    }
}
