//! `json.encode` and `json.decode` within the evaluation's JSON limits.
//!
//! The interpreter's own `json` module recurses once per nesting level
//! with no limit, so a value nested 100 000 deep overflows the native
//! stack and aborts the whole process; and its output has no size bound
//! (`[s] * n` costs `n` pointers but encodes to `n` copies of `s`). These
//! walk the value first with `value_to_json`'s depth and byte budget
//! ([`EvalLimits::max_value_depth`], [`EvalLimits::max_value_bytes`]), and
//! only then encode it the interpreter's way (same text, dict order kept).
//!
//! [`EvalLimits::max_value_depth`]: cordon_starlark_protocol::EvalLimits::max_value_depth
//! [`EvalLimits::max_value_bytes`]: cordon_starlark_protocol::EvalLimits::max_value_bytes

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;

use super::{ctx, err};
use crate::value_limits::{json_to_value, value_to_json};

#[starlark_module]
pub(super) fn json_module(builder: &mut GlobalsBuilder) {
    /// Encode `x` as JSON text (compact, dict order kept).
    fn encode<'v>(
        #[starlark(require = pos)] x: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<String> {
        let c = ctx(eval)?;
        value_to_json(x, c.max_value_depth, c.max_value_bytes)
            .map_err(|e| err(format!("json.encode: {e}")))?;
        x.to_json().map_err(|e| err(format!("json.encode: {e}")))
    }

    /// Decode JSON text into a value (ints of any size exactly).
    fn decode<'v>(
        #[starlark(require = pos)] x: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let depth = ctx(eval)?.max_value_depth;
        let j: serde_json::Value =
            serde_json::from_str(x).map_err(|e| err(format!("json.decode: {e}")))?;
        json_to_value(eval.heap(), &j, depth).map_err(|e| err(format!("json.decode: {e}")))
    }
}
