//! Starlark bindings: convert Starlark arguments to protocol structs, call
//! the invocation's [`ModuleCalls`], convert the reply back. No I/O here.
//! This file holds the globals per module set, `print` capture
//! and the `secrets` and `notifications` builtins; `http.rs` and
//! `provider.rs` hold those modules' builtins, `json.rs` a bounded
//! replacement for the interpreter's `json`.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::sync::{Arc, OnceLock};

use starlark::environment::{Globals, GlobalsBuilder, LibraryExtension};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::none::NoneType;
use starlark::values::{ProvidesStaticType, Value};

use cordon_starlark_protocol::{
    ModuleCall, ModuleCalls, ModuleReply, ModuleSet, Notification, SecretGet,
};

mod guards;
mod guards_calls;
mod http;
mod json;
mod provider;

use http::http_module;
use json::json_module;
use provider::provider_module;

/// Per-evaluation state reachable from builtins via `Evaluator::extra`.
#[derive(ProvidesStaticType)]
pub(crate) struct EvalContext {
    pub(crate) calls: Arc<dyn ModuleCalls>,
    pub(crate) max_value_depth: usize,
    pub(crate) max_value_bytes: usize,
    /// The heap limit the size pre-checks (`guards.rs`) hold results to.
    pub(crate) max_heap_bytes: usize,
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

/// The slot of a module set in the globals cache: one bit per module.
fn cache_index(modules: ModuleSet) -> usize {
    (modules.secrets as usize)
        | (modules.notifications as usize) << 1
        | (modules.http as usize) << 2
        | (modules.provider as usize) << 3
}

/// The globals for a module set (cached; one `Globals` per combination).
pub fn globals_for(modules: ModuleSet) -> &'static Globals {
    static CACHE: [OnceLock<Globals>; 16] = [const { OnceLock::new() }; 16];
    CACHE[cache_index(modules)].get_or_init(|| {
        let mut b =
            GlobalsBuilder::extended_by(&[LibraryExtension::StructType, LibraryExtension::Print]);
        b.namespace("json", json_module);
        guards::guards(&mut b);
        guards_calls::guard_calls(&mut b);
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
