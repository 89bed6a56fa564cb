//! Starlark bindings: convert Starlark arguments to protocol structs, call
//! the invocation's [`ModuleCalls`], convert the reply back. No I/O here.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::sync::{Arc, OnceLock};

use allocative::Allocative;
use starlark::environment::{Globals, GlobalsBuilder, LibraryExtension, Methods, MethodsBuilder};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::starlark_simple_value;
use starlark::values::dict::{AllocDict, DictRef};
use starlark::values::float::StarlarkFloat;
use starlark::values::list::ListRef;
use starlark::values::none::NoneType;
use starlark::values::structs::AllocStruct;
use starlark::values::{
    starlark_value, Heap, NoSerialize, ProvidesStaticType, StarlarkPagable, StarlarkValue,
    UnpackValue, Value,
};

use crate::limits::{json_to_value, value_to_json};
use crate::protocol::{
    ChatMessage, CompletionRequest, HttpRequest, ModuleCall, ModuleCalls, ModuleReply,
    Notification, SecretGet,
};

/// Which host modules are present in a script's globals.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct ModuleSet {
    /// `secrets`
    pub secrets: bool,
    /// `notifications`
    pub notifications: bool,
    /// `http`
    pub http: bool,
    /// `provider`
    pub provider: bool,
}

impl ModuleSet {
    /// No host modules.
    pub const NONE: ModuleSet = ModuleSet {
        secrets: false,
        notifications: false,
        http: false,
        provider: false,
    };

    fn index(self) -> usize {
        (self.secrets as usize)
            | (self.notifications as usize) << 1
            | (self.http as usize) << 2
            | (self.provider as usize) << 3
    }

    /// Names of the present modules.
    pub fn names(self) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.secrets {
            v.push("secrets");
        }
        if self.notifications {
            v.push("notifications");
        }
        if self.http {
            v.push("http");
        }
        if self.provider {
            v.push("provider");
        }
        v
    }
}

/// Per-evaluation state reachable from builtins via `Evaluator::extra`.
#[derive(ProvidesStaticType)]
pub(crate) struct EvalContext {
    pub(crate) calls: Arc<dyn ModuleCalls>,
    pub(crate) max_value_depth: usize,
    pub(crate) max_value_bytes: usize,
}

/// `print` sink with a byte cap.
pub(crate) struct CapturedOutput {
    pub(crate) buf: RefCell<String>,
    max: usize,
    pub(crate) overflowed: Cell<bool>,
}

impl CapturedOutput {
    pub(crate) fn new(max: usize) -> Self {
        CapturedOutput {
            buf: RefCell::new(String::new()),
            max,
            overflowed: Cell::new(false),
        }
    }
}

impl starlark::PrintHandler for CapturedOutput {
    fn println(&self, text: &str) -> starlark::Result<()> {
        let mut buf = self.buf.borrow_mut();
        if buf.len() + text.len() + 1 > self.max {
            self.overflowed.set(true);
            return Err(starlark::Error::new_other(anyhow::anyhow!(
                "print output exceeds the {} byte limit",
                self.max
            )));
        }
        buf.push_str(text);
        buf.push('\n');
        Ok(())
    }
}

/// The globals for a module set (cached; one `Globals` per combination).
pub fn globals_for(modules: ModuleSet) -> &'static Globals {
    static CACHE: [OnceLock<Globals>; 16] = [const { OnceLock::new() }; 16];
    CACHE[modules.index()].get_or_init(|| {
        let mut b = GlobalsBuilder::extended_by(&[
            LibraryExtension::StructType,
            LibraryExtension::Print,
            LibraryExtension::Json,
        ]);
        if modules.secrets {
            b.namespace("secrets", secrets_module);
        }
        if modules.notifications {
            b.namespace("notifications", notifications_module);
        }
        if modules.http {
            b.namespace("http", http_module);
        }
        if modules.provider {
            b.namespace("provider", provider_module);
        }
        b.build()
    })
}

fn err(msg: impl fmt::Display) -> starlark::Error {
    starlark::Error::new_other(anyhow::anyhow!("{msg}"))
}

fn ctx<'a>(eval: &'a Evaluator) -> starlark::Result<&'a EvalContext> {
    eval.extra
        .and_then(|e| e.downcast_ref::<EvalContext>())
        .ok_or_else(|| err("host modules are not available in this evaluation"))
}

fn dispatch(eval: &Evaluator, call: ModuleCall) -> starlark::Result<ModuleReply> {
    let name = call.name();
    ctx(eval)?
        .calls
        .call(call)
        .map_err(|e| err(format!("{name}: {e}")))
}

fn unexpected(name: &str) -> starlark::Error {
    err(format!("{name}: the host sent an unexpected reply"))
}

#[starlark_module]
fn secrets_module(builder: &mut GlobalsBuilder) {
    /// The package's own secret `name`, or None.
    fn get<'v>(
        #[starlark(require = pos)] name: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<Value<'v>> {
        match dispatch(
            eval,
            ModuleCall::SecretGet(SecretGet {
                name: name.to_owned(),
            }),
        )? {
            ModuleReply::Secret(Some(s)) => Ok(eval.heap().alloc(s)),
            ModuleReply::Secret(None) => Ok(Value::new_none()),
            _ => Err(unexpected("secrets.get")),
        }
    }
}

#[starlark_module]
fn notifications_module(builder: &mut GlobalsBuilder) {
    /// Send a notification attributed to this package.
    fn send<'v>(
        #[starlark(require = pos)] title: &str,
        #[starlark(require = pos)] body: &str,
        #[starlark(require = named, default = "info")] level: &str,
        #[starlark(require = named)] url: Option<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> starlark::Result<NoneType> {
        if !matches!(level, "info" | "warning" | "error") {
            return Err(err(
                "notifications.send: level must be \"info\", \"warning\" or \"error\"",
            ));
        }
        let n = Notification {
            package_id: String::new(),
            user_id: None,
            channel_id: None,
            title: title.to_owned(),
            body: body.to_owned(),
            level: level.to_owned(),
            url: url.map(str::to_owned),
        };
        match dispatch(eval, ModuleCall::Notify(n))? {
            ModuleReply::Notified => Ok(NoneType),
            _ => Err(unexpected("notifications.send")),
        }
    }
}

/// An int or float as f64.
fn unpack_number(v: Value) -> Option<f64> {
    match v.get_type() {
        "int" => i64::unpack_value(v).ok().flatten().map(|i| i as f64),
        "float" => StarlarkFloat::unpack_value(v).ok().flatten().map(|f| f.0),
        _ => None,
    }
}

fn timeout_ms(v: Option<Value>) -> starlark::Result<Option<u64>> {
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

fn build_http(
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

fn do_http<'v>(eval: &mut Evaluator<'v, '_, '_>, req: HttpRequest) -> starlark::Result<Value<'v>> {
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
fn http_module(builder: &mut GlobalsBuilder) {
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

fn parse_messages(v: Value) -> starlark::Result<Vec<ChatMessage>> {
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
fn provider_module(builder: &mut GlobalsBuilder) {
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
