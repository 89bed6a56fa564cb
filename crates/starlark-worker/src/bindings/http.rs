//! The `http` module's builtins: arguments to an `HttpRequest`, the
//! reply to a response value with its methods.

use std::fmt;

use allocative::Allocative;
use starlark::environment::{GlobalsBuilder, Methods, MethodsBuilder};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::starlark_simple_value;
use starlark::values::dict::{AllocDict, DictRef};
use starlark::values::float::StarlarkFloat;
use starlark::values::{
    starlark_value, Heap, NoSerialize, ProvidesStaticType, StarlarkPagable, StarlarkValue,
    UnpackValue, Value,
};

use crate::value_limits::{json_to_value, value_to_json};
use cordon_starlark_protocol::{HttpRequest, ModuleCall, ModuleReply};

use super::{ctx, dispatch, err, unexpected};

/// An int or float as f64.
pub(super) fn unpack_number(v: Value) -> Option<f64> {
    match v.get_type() {
        "int" => i64::unpack_value(v).ok().flatten().map(|i| i as f64),
        "float" => StarlarkFloat::unpack_value(v).ok().flatten().map(|f| f.0),
        _ => None,
    }
}

pub(super) fn timeout_ms(v: Option<Value>) -> starlark::Result<Option<u64>> {
    let Some(v) = v else { return Ok(None) };
    if v.is_none() {
        return Ok(None);
    }
    let secs = unpack_number(v).ok_or_else(|| err("http: timeout must be a number of seconds"))?;
    if !(secs > 0.0 && secs.is_finite()) {
        return Err(err("http: timeout must be a positive number of seconds"));
    }
    Ok(Some((secs * 1000.0).min(u64::MAX as f64 / 2.0) as u64))
}

pub(super) fn build_http(
    eval: &Evaluator,
    method: &str,
    url: &str,
    headers: Option<Value>,
    body: Option<Value>,
    json: Option<Value>,
    timeout: Option<Value>,
) -> starlark::Result<HttpRequest> {
    let mut hs = Vec::new();
    if let Some(h) = headers.filter(|h| !h.is_none()) {
        let d =
            DictRef::from_value(h).ok_or_else(|| err("http: headers must be a dict of strings"))?;
        for (k, v) in d.iter() {
            match (k.unpack_str(), v.unpack_str()) {
                (Some(k), Some(v)) => hs.push((k.to_owned(), v.to_owned())),
                _ => return Err(err("http: headers must be a dict of strings")),
            }
        }
    }
    let body = match (body.filter(|b| !b.is_none()), json.filter(|j| !j.is_none())) {
        (Some(_), Some(_)) => return Err(err("http: pass either body= or json=, not both")),
        (Some(b), None) => Some(
            b.unpack_str()
                .ok_or_else(|| err("http: body must be a string; use json= for structured data"))?
                .to_owned(),
        ),
        (None, Some(j)) => {
            let c = ctx(eval)?;
            let v = value_to_json(j, c.max_value_depth, c.max_value_bytes)
                .map_err(|e| err(format!("http: json= {e}")))?;
            if !hs
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            {
                hs.push(("content-type".to_owned(), "application/json".to_owned()));
            }
            Some(v.to_string())
        }
        (None, None) => None,
    };
    Ok(HttpRequest {
        method: method.to_ascii_uppercase(),
        url: url.to_owned(),
        headers: hs,
        body,
        timeout_ms: timeout_ms(timeout)?,
    })
}

pub(super) fn do_http<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    req: HttpRequest,
) -> starlark::Result<Value<'v>> {
    match dispatch(eval, ModuleCall::Http(req))? {
        ModuleReply::Http(r) => Ok(eval.heap().alloc(HttpResponseValue {
            status: r.status,
            url: r.url,
            headers: r.headers,
            body: r.body,
        })),
        _ => Err(unexpected("http")),
    }
}

#[starlark_module]
pub(super) fn http_module(builder: &mut GlobalsBuilder) {
    /// HTTP GET.
    fn get<'v>(
        #[starlark(require = pos)] url: &str,
        #[starlark(require = named)] headers: Option<Value<'v>>,
        #[starlark(require = named)] body: Option<Value<'v>>,
        #[starlark(require = named)] json: Option<Value<'v>>,
        #[starlark(require = named)] timeout: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let req = build_http(eval, "GET", url, headers, body, json, timeout)?;
        do_http(eval, req)
    }

    /// HTTP POST with `body=` (text) or `json=` (encoded for you).
    fn post<'v>(
        #[starlark(require = pos)] url: &str,
        #[starlark(require = named)] headers: Option<Value<'v>>,
        #[starlark(require = named)] body: Option<Value<'v>>,
        #[starlark(require = named)] json: Option<Value<'v>>,
        #[starlark(require = named)] timeout: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let req = build_http(eval, "POST", url, headers, body, json, timeout)?;
        do_http(eval, req)
    }

    /// Any method.
    fn request<'v>(
        #[starlark(require = pos)] method: &str,
        #[starlark(require = pos)] url: &str,
        #[starlark(require = named)] headers: Option<Value<'v>>,
        #[starlark(require = named)] body: Option<Value<'v>>,
        #[starlark(require = named)] json: Option<Value<'v>>,
        #[starlark(require = named)] timeout: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        let req = build_http(eval, method, url, headers, body, json, timeout)?;
        do_http(eval, req)
    }
}

/// The value returned by `http.get/post/request`.
#[derive(Debug, Clone, ProvidesStaticType, NoSerialize, StarlarkPagable, Allocative)]
pub struct HttpResponseValue {
    status: u16,
    url: String,
    headers: Vec<(String, String)>,
    body: String,
}

starlark_simple_value!(HttpResponseValue);

impl fmt::Display for HttpResponseValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<http_response {} {}>", self.status, self.url)
    }
}

starlark::methods_static!(HTTP_RESPONSE_METHODS = http_response_methods);

#[starlark_value(type = "http_response")]
impl<'v> StarlarkValue<'v> for HttpResponseValue {
    fn get_methods() -> Option<&'static Methods> {
        Some(HTTP_RESPONSE_METHODS.methods())
    }
}

#[starlark_module]
fn http_response_methods(builder: &mut MethodsBuilder) {
    /// HTTP status code.
    #[starlark(attribute)]
    fn status(this: &HttpResponseValue) -> starlark::Result<i32> {
        Ok(this.status as i32)
    }

    /// True for 2xx.
    #[starlark(attribute)]
    fn ok(this: &HttpResponseValue) -> starlark::Result<bool> {
        Ok((200..300).contains(&this.status))
    }

    /// Final URL after redirects.
    #[starlark(attribute)]
    fn url<'v>(this: &HttpResponseValue, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        Ok(heap.alloc(this.url.as_str()))
    }

    /// Body as text.
    #[starlark(attribute)]
    fn body<'v>(this: &HttpResponseValue, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        Ok(heap.alloc(this.body.as_str()))
    }

    /// Headers as a dict (lower-case names; repeated headers joined by ", ").
    #[starlark(attribute)]
    fn headers<'v>(this: &HttpResponseValue, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        let mut merged: Vec<(String, String)> = Vec::new();
        for (k, v) in &this.headers {
            if let Some(e) = merged.iter_mut().find(|(mk, _)| mk == k) {
                e.1.push_str(", ");
                e.1.push_str(v);
            } else {
                merged.push((k.clone(), v.clone()));
            }
        }
        Ok(heap.alloc(AllocDict(merged)))
    }

    /// Body parsed as JSON.
    fn json<'v>(this: &HttpResponseValue, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        // serde_json refuses nesting deeper than 128 while parsing.
        let j: serde_json::Value = serde_json::from_str(&this.body)
            .map_err(|e| err(format!("response body is not valid JSON: {e}")))?;
        json_to_value(heap, &j, 128).map_err(err)
    }
}
