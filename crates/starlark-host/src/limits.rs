//! Per-call limits, the pre-parse nesting scanner, and depth-limited
//! conversions between Starlark values and JSON.

use std::time::Duration;

use starlark::values::dict::DictRef;
use starlark::values::float::StarlarkFloat;
use starlark::values::list::ListRef;
use starlark::values::structs::StructRef;
use starlark::values::tuple::TupleRef;
use starlark::values::{Heap, UnpackValue, Value};

use crate::http::HttpLimits;

/// Resource limits applied to every evaluation (loading a package, and
/// each entry-point call). All have safe defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Instruction budget: one tick is a function call or a loop iteration.
    pub max_ticks: u64,
    /// Wall-clock deadline per evaluation (including blocking module calls).
    pub timeout: Duration,
    /// Starlark heap size, checked periodically by the interpreter.
    pub max_heap_bytes: usize,
    /// Starlark call-stack depth.
    pub max_call_depth: usize,
    /// Captured `print` output, in bytes.
    pub max_output_bytes: usize,
    /// Size of one source file, in bytes.
    pub max_source_bytes: usize,
    /// Bracket nesting depth of source, checked before parsing.
    pub max_nesting_depth: usize,
    /// Nesting depth of values converted to/from JSON.
    pub max_value_depth: usize,
    /// Approximate JSON size of a converted value, in bytes.
    pub max_value_bytes: usize,
    /// Nested `load()` depth.
    pub max_load_depth: usize,
    /// Native stack of the evaluation thread.
    pub eval_stack_bytes: usize,
    /// Caps of the `http` module.
    pub http: HttpLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_ticks: 5_000_000,
            timeout: Duration::from_secs(10),
            max_heap_bytes: 64 * 1024 * 1024,
            max_call_depth: 200,
            max_output_bytes: 64 * 1024,
            max_source_bytes: 512 * 1024,
            max_nesting_depth: 64,
            max_value_depth: 64,
            max_value_bytes: 4 * 1024 * 1024,
            max_load_depth: 16,
            eval_stack_bytes: 64 * 1024 * 1024,
            http: HttpLimits::default(),
        }
    }
}

/// Deepest bracket nesting of Starlark source, ignoring strings and
/// comments. Returns `Err((depth, line))` as soon as `max` is exceeded.
pub fn check_nesting(src: &str, max: usize) -> Result<usize, (usize, usize)> {
    let b = src.as_bytes();
    let mut i = 0;
    let mut depth = 0usize;
    let mut deepest = 0usize;
    let mut line = 1usize;
    while i < b.len() {
        match b[i] {
            b'\n' => line += 1,
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            q @ (b'\'' | b'"') => {
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
                        c if c == q => {
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
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return Err((depth, line));
                }
                deepest = deepest.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    Ok(deepest)
}

/// Depth- and size-limited conversion of a Starlark value to JSON. Never
/// recurses deeper than `max_depth` (self-referencing lists are caught by
/// the depth limit). Functions and other opaque values are errors.
pub fn value_to_json(v: Value, max_depth: usize, max_bytes: usize) -> Result<serde_json::Value, String> {
    let mut budget = max_bytes;
    to_json_inner(v, max_depth, &mut budget, max_bytes)
}

fn charge(budget: &mut usize, n: usize, max: usize) -> Result<(), String> {
    *budget = budget
        .checked_sub(n)
        .ok_or_else(|| format!("value is larger than {max} bytes as JSON"))?;
    Ok(())
}

fn to_json_inner(
    v: Value,
    depth: usize,
    budget: &mut usize,
    max: usize,
) -> Result<serde_json::Value, String> {
    use serde_json::Value as J;
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
            return i64::unpack_value(v)
                .ok()
                .flatten()
                .map(|i| J::Number(i.into()))
                .ok_or_else(|| "integer does not fit in 64 bits".to_owned());
        }
        "float" => {
            let f = StarlarkFloat::unpack_value(v)
                .ok()
                .flatten()
                .map(|f| f.0)
                .ok_or_else(|| "bad float".to_owned())?;
            return serde_json::Number::from_f64(f)
                .map(J::Number)
                .ok_or_else(|| format!("float {f} has no JSON form"));
        }
        _ => {}
    }
    if depth == 0 {
        return Err("value is nested too deeply to convert to JSON".to_owned());
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
            let k = k
                .unpack_str()
                .ok_or_else(|| format!("dict key of type {} is not a string", k.get_type()))?;
            charge(budget, k.len(), max)?;
            m.insert(k.to_owned(), to_json_inner(x, depth - 1, budget, max)?);
        }
        return Ok(J::Object(m));
    }
    if let Some(s) = StructRef::from_value(v) {
        let mut m = serde_json::Map::new();
        for (k, x) in s.iter() {
            charge(budget, k.as_str().len(), max)?;
            m.insert(k.as_str().to_owned(), to_json_inner(x, depth - 1, budget, max)?);
        }
        return Ok(J::Object(m));
    }
    Err(format!("a value of type {} cannot be converted to JSON", v.get_type()))
}

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
            if let Some(i) = n.as_i64() {
                heap.alloc(i)
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
        assert_eq!(check_nesting("x = '((((((' # ((((((\ny = \"\"\"[[[[\n[[[\"\"\"", 2), Ok(0));
        assert_eq!(check_nesting("x = 'a\\'(' + (1)", 5), Ok(1));
        assert_eq!(check_nesting(&"(".repeat(100), 64), Err((65, 1)));
        assert_eq!(check_nesting("\n\n[[[", 2), Err((3, 3)));
    }
}
