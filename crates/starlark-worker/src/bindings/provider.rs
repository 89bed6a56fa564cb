//! The `provider` module's builtin: chat messages to a
//! `CompletionRequest`, the completion back to a struct.

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::dict::{AllocDict, DictRef};
use starlark::values::list::ListRef;
use starlark::values::structs::AllocStruct;
use starlark::values::Value;

use cordon_starlark_protocol::{ChatMessage, CompletionRequest, ModuleCall, ModuleReply};

use super::http::unpack_number;
use super::{dispatch, err, unexpected};

pub(super) fn parse_messages(v: Value) -> starlark::Result<Vec<ChatMessage>> {
    if let Some(s) = v.unpack_str() {
        return Ok(vec![ChatMessage {
            role: "user".to_owned(),
            content: s.to_owned(),
        }]);
    }
    let list = ListRef::from_value(v).ok_or_else(|| {
        err("provider.complete: pass a prompt string or a list of {\"role\": ..., \"content\": ...} dicts")
    })?;
    let mut out = Vec::new();
    for m in list.iter() {
        let d = DictRef::from_value(m)
            .ok_or_else(|| err("provider.complete: each message must be a dict"))?;
        let get = |k: &str| {
            d.get_str(k)
                .and_then(|x| x.unpack_str().map(str::to_owned))
                .ok_or_else(|| err(format!("provider.complete: message needs a string {k:?}")))
        };
        out.push(ChatMessage {
            role: get("role")?,
            content: get("content")?,
        });
    }
    if out.is_empty() {
        return Err(err("provider.complete: messages must not be empty"));
    }
    Ok(out)
}

#[starlark_module]
pub(super) fn provider_module(builder: &mut GlobalsBuilder) {
    /// Chat completion through the resolved provider. The key is never
    /// visible to the script.
    fn complete<'v>(
        #[starlark(require = pos)] input: Option<Value<'v>>,
        #[starlark(require = named)] messages: Option<Value<'v>>,
        #[starlark(require = named)] prompt: Option<&str>,
        #[starlark(require = named)] model: Option<&str>,
        #[starlark(require = named)] max_tokens: Option<i32>,
        #[starlark(require = named)] temperature: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let msgs = match (input, messages, prompt) {
            (Some(v), None, None) | (None, Some(v), None) => parse_messages(v)?,
            (None, None, Some(p)) => parse_messages(eval.heap().alloc(p))?,
            (None, None, None) => return Err(err("provider.complete: pass a prompt or messages=")),
            _ => return Err(err(
                "provider.complete: pass only one of the positional input, messages= or prompt=",
            )),
        };
        let max_tokens = match max_tokens {
            Some(n) if n <= 0 => return Err(err("provider.complete: max_tokens must be positive")),
            n => n.map(|n| n as u32),
        };
        let temperature = match temperature.filter(|t| !t.is_none()) {
            None => None,
            Some(t) => Some(
                unpack_number(t)
                    .filter(|f| f.is_finite() && *f >= 0.0)
                    .ok_or_else(|| {
                        err("provider.complete: temperature must be a non-negative number")
                    })?,
            ),
        };
        let req = CompletionRequest {
            messages: msgs,
            model: model.map(str::to_owned),
            max_tokens,
            temperature,
        };
        match dispatch(eval, ModuleCall::Complete(req))? {
            ModuleReply::Completion(c) => {
                let heap = eval.heap();
                let usage = match c.usage {
                    Some(u) => heap.alloc(AllocDict([
                        ("prompt_tokens", u.prompt_tokens as i64),
                        ("completion_tokens", u.completion_tokens as i64),
                        ("total_tokens", u.total_tokens as i64),
                    ])),
                    None => Value::new_none(),
                };
                let finish = match c.finish_reason {
                    Some(f) => heap.alloc(f),
                    None => Value::new_none(),
                };
                Ok(heap.alloc(AllocStruct([
                    ("content", heap.alloc(c.content)),
                    ("model", heap.alloc(c.model)),
                    ("finish_reason", finish),
                    ("usage", usage),
                    ("key_source", heap.alloc(c.key_source)),
                ])))
            }
            _ => Err(unexpected("provider.complete")),
        }
    }
}
