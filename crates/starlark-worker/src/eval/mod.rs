//! Compiling (parse + top-level run + freeze) and calling packages. These
//! functions are synchronous and recurse: run them on a thread with a large
//! stack ([`run_on_eval_thread`], in `threads.rs`, does this).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use starlark::environment::{FrozenModule, Globals, Module};
use starlark::eval::{Evaluator, FileLoader};
use starlark::syntax::{AstModule, Dialect};
use starlark::values::Value;

use cordon_starlark_protocol::{
    normalize_load_path, DenyAllCalls, EvalLimits, LimitKind, ModuleCall, ModuleCalls, ModuleError,
    ModuleReply, ModuleSet, Package,
};

use crate::bindings::{globals_for, CapturedOutput, EvalContext};
use crate::cancel::CancelToken;
use crate::failure::EvalFailure;
use crate::value_limits::{
    check_source_shape, json_to_value, value_to_json, JsonError, ShapeError,
};

mod size_guards;
pub(crate) use size_guards::METHODS as GUARDED_METHODS;

/// A package parsed, its top level executed and frozen. Immutable and
/// shareable between threads; every call evaluates on a fresh heap.
pub struct CompiledPackage {
    package_id: String,
    modules: ModuleSet,
    top_level: TopLevel,
    load_output: String,
    globals: serde_json::Map<String, serde_json::Value>,
    functions: Vec<String>,
}

impl std::fmt::Debug for CompiledPackage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledPackage")
            .field("package_id", &self.package_id)
            .field("modules", &self.modules)
            .field("functions", &self.functions)
            .field(
                "per_call",
                &matches!(self.top_level, TopLevel::PerCall { .. }),
            )
            .finish()
    }
}

/// What a package's top level left for its calls.
enum TopLevel {
    /// Run once with module calls refused, then frozen: every call shares
    /// it (the fast path).
    Frozen(FrozenModule),
    /// The top level calls a module (the seed's style, e.g.
    /// `TOKEN = secrets.get("api")`): it runs again at the start of every
    /// call, with that call's modules, and its output comes first in the
    /// call's output. Its state then never outlives the call, so no
    /// invoker's answers reach another's.
    PerCall {
        /// For `load()` of its other files.
        package: Box<Package>,
        /// Its script, checked and parsed once (with the size checks'
        /// rewrites); each call evaluates a copy.
        script: Box<AstModule>,
    },
}

/// The module calls of a top level run once for the cache: refused (the
/// frozen state must not depend on an invoker), and remembered, so that a
/// package whose top level needs them runs it per call instead.
#[derive(Default)]
struct TopLevelCalls {
    attempted: std::sync::atomic::AtomicBool,
}

impl ModuleCalls for TopLevelCalls {
    fn call(&self, call: ModuleCall) -> Result<ModuleReply, ModuleError> {
        self.attempted
            .store(true, std::sync::atomic::Ordering::Relaxed);
        DenyAllCalls.call(call)
    }
}

fn dialect() -> Dialect {
    Dialect {
        enable_top_level_stmt: true,
        enable_keyword_only_arguments: true,
        enable_f_strings: true,
        ..Dialect::Standard
    }
}

struct Guard<'a> {
    limits: &'a EvalLimits,
    deadline: Instant,
    cancel: &'a CancelToken,
    output: &'a CapturedOutput,
}

impl Guard<'_> {
    fn configure<'v, 'a, 'e>(
        &'a self,
        eval: &mut Evaluator<'v, 'a, 'e>,
        ctx: &'a EvalContext,
    ) -> Result<(), starlark::Error> {
        let other = |e: anyhow::Error| starlark::Error::new_other(e);
        eval.set_max_tick_count(self.limits.max_ticks.max(1))
            .map_err(other)?;
        eval.set_max_heap_size(self.limits.max_heap_bytes.max(1))
            .map_err(other)?;
        eval.set_max_callstack_size(self.limits.max_call_depth.max(1))
            .map_err(other)?;
        let deadline = self.deadline;
        let cancel = self.cancel.clone();
        eval.set_check_cancelled(Box::new(move || {
            cancel.is_cancelled() || Instant::now() >= deadline
        }));
        eval.set_print_handler(self.output);
        eval.extra = Some(ctx);
        Ok(())
    }

    /// What ended an evaluation: a limit only from what a script cannot
    /// write — the error's kind, the interpreter's own limit errors (their
    /// whole text, with the configured value), Cordon's typed source
    /// limits ([`OwnLimit`]), the output's overflow flag, the cancel
    /// token and the clock. Any other error is the script's, whatever its
    /// text says (a key, an attribute or a file name echoes the script's
    /// words).
    fn classify(&self, package: &str, e: starlark::Error) -> EvalFailure {
        use starlark::ErrorKind;
        let message = e.to_string();
        let limit = |kind| EvalFailure::Limit {
            package: package.to_owned(),
            kind,
            message: message.clone(),
        };
        if self.output.overflowed.get() {
            return limit(LimitKind::Output);
        }
        let script = || EvalFailure::Script {
            package: package.to_owned(),
            message: message.clone(),
        };
        if self.cancel.is_cancelled() && !matches!(e.kind(), ErrorKind::Fail(_)) {
            // The caller's token (set_check_cancelled stops on it).
            return EvalFailure::Cancelled {
                package: package.to_owned(),
            };
        }
        let by_script = matches!(e.kind(), ErrorKind::Fail(_));
        if !by_script && Instant::now() >= self.deadline {
            return EvalFailure::Limit {
                package: package.to_owned(),
                kind: LimitKind::Time,
                message: format!(
                    "evaluation ran past its {} ms deadline: {message}",
                    self.limits.timeout.as_millis()
                ),
            };
        }
        let inner = match e.kind() {
            ErrorKind::StackOverflow(_) => return limit(LimitKind::CallStack),
            ErrorKind::Other(inner) => inner,
            _ => return script(),
        };
        if let Some(l) = inner.downcast_ref::<OwnLimit>() {
            return limit(l.kind);
        }
        let text = inner.to_string();
        let l = self.limits;
        let ticks = format!(
            "Execution duration limit of {} ticks has been exceeded",
            l.max_ticks.max(1)
        );
        if text == ticks {
            return limit(LimitKind::Ticks);
        }
        let heap = format!(
            "Heap memory limit of {} bytes exceeded.",
            l.max_heap_bytes.max(1)
        );
        if text.starts_with(&heap) {
            return limit(LimitKind::Heap);
        }
        script()
    }
}

/// A limit of Cordon's own checks (source size and nesting, the heap
/// guards of the bindings): typed, so that no text of a script's can pose
/// as one.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct OwnLimit {
    kind: LimitKind,
    message: String,
}

/// The error of one of Cordon's own limits ([`OwnLimit`]).
pub(crate) fn own_limit(kind: LimitKind, message: String) -> starlark::Error {
    starlark::Error::new_other(OwnLimit { kind, message })
}

struct PackageLoader<'p> {
    pkg: &'p Package,
    globals: &'static Globals,
    guard: &'p Guard<'p>,
    ctx: &'p EvalContext,
    stack: RefCell<Vec<String>>,
    done: RefCell<HashMap<String, FrozenModule>>,
}

impl PackageLoader<'_> {
    /// Checks `path`'s size and shape against the limits, and parses it.
    fn parse(&self, path: &str) -> Result<AstModule, starlark::Error> {
        let err = |m: String| starlark::Error::new_other(anyhow::anyhow!(m));
        let src = self.pkg.sources.get(path).ok_or_else(|| {
            err(format!(
                "load: {path:?} is not a file of package {:?}",
                self.pkg.id
            ))
        })?;
        let limits = self.guard.limits;
        let over = own_limit;
        if src.len() > limits.max_source_bytes {
            return Err(over(
                LimitKind::SourceSize,
                format!(
                    "source size limit: {path} is {} bytes, more than the {} byte limit",
                    src.len(),
                    limits.max_source_bytes
                ),
            ));
        }
        match check_source_shape(src, limits.max_nesting_depth, limits.max_expression_depth) {
            Ok(_) => {}
            Err(ShapeError::Nesting(depth, line)) => {
                return Err(over(LimitKind::Nesting, format!(
                    "nesting limit: {path}:{line} nests brackets {depth} deep, more than the limit of {}",
                    limits.max_nesting_depth
                )))
            }
            Err(ShapeError::ExpressionDepth(depth, line)) => {
                return Err(over(LimitKind::Nesting, format!(
                    "nesting limit: {path}:{line} has an operator chain about {depth} deep, more than the limit of {}; split the expression",
                    limits.max_expression_depth
                )))
            }
        }
        size_guards::parse_guarded(path, src, &dialect())
    }

    fn eval_file(&self, path: &str) -> Result<FrozenModule, starlark::Error> {
        let err = |m: String| starlark::Error::new_other(anyhow::anyhow!(m));
        let ast = self.parse(path)?;
        Module::with_temp_heap(|module| {
            let mut eval = Evaluator::new(&module);
            eval.set_loader(self);
            self.guard.configure(&mut eval, self.ctx)?;
            eval.eval_module(ast, self.globals)?;
            drop(eval);
            module
                .freeze()
                .map_err(|e| err(format!("freezing {path} failed: {e:?}")))
        })
    }
}

impl FileLoader for PackageLoader<'_> {
    fn load(&self, path: &str) -> starlark::Result<FrozenModule> {
        let err = |m: String| starlark::Error::new_other(anyhow::anyhow!(m));
        let norm = normalize_load_path(path).ok_or_else(|| {
            err(format!(
                "load({path:?}): only relative paths inside the package are allowed"
            ))
        })?;
        if let Some(m) = self.done.borrow().get(&norm) {
            return Ok(m.clone());
        }
        if self.stack.borrow().contains(&norm) {
            return Err(err(format!("load({path:?}): cyclic load")));
        }
        if self.stack.borrow().len() >= self.guard.limits.max_load_depth {
            return Err(err(format!(
                "load({path:?}): loads nested more than {} deep",
                self.guard.limits.max_load_depth
            )));
        }
        self.stack.borrow_mut().push(norm.clone());
        let r = self.eval_file(&norm);
        self.stack.borrow_mut().pop();
        let m = r?;
        self.done.borrow_mut().insert(norm, m.clone());
        Ok(m)
    }
}

/// Parse, run the top level and freeze a package (an error carries what
/// the top level printed before it). Module calls are refused while the
/// top level runs (see `cordon-starlark`'s crate docs), so the result does
/// not depend on any invoker; a package whose top level calls a module is
/// instead checked (size, shape, syntax) and kept to run its top level per
/// call.
/// Recurses: call on a large-stack thread.
pub fn compile_package(
    pkg: &Package,
    modules: ModuleSet,
    limits: &EvalLimits,
    cancel: &CancelToken,
) -> Result<CompiledPackage, (EvalFailure, String)> {
    let output = CapturedOutput::new(limits.max_output_bytes);
    let guard = Guard {
        limits,
        deadline: Instant::now() + limits.timeout,
        cancel,
        output: &output,
    };
    let calls = Arc::new(TopLevelCalls::default());
    let ctx = EvalContext {
        calls: calls.clone(),
        max_value_depth: limits.max_value_depth,
        max_value_bytes: limits.max_value_bytes,
        max_heap_bytes: limits.max_heap_bytes,
    };
    let loader = PackageLoader {
        pkg,
        globals: globals_for(modules),
        guard: &guard,
        ctx: &ctx,
        stack: RefCell::new(vec![pkg.manifest.script.clone()]),
        done: RefCell::new(HashMap::new()),
    };
    let frozen = match loader.eval_file(&pkg.manifest.script) {
        Ok(frozen) => frozen,
        Err(_) if calls.attempted.load(std::sync::atomic::Ordering::Relaxed) => {
            return per_call_package(pkg, modules, &loader)
                .map_err(|e| (guard.classify(&pkg.id, e), String::new()));
        }
        Err(e) => {
            let printed = output.buf.borrow().clone();
            return Err((guard.classify(&pkg.id, e), printed));
        }
    };
    let mut globals = serde_json::Map::new();
    let mut functions = Vec::new();
    let names: Vec<String> = frozen.names().map(|n| n.as_str().to_owned()).collect();
    for name in names {
        let Ok(Some(v)) = frozen.get_option(&name) else {
            continue;
        };
        let value = v.value();
        if value.get_type() == "function" {
            functions.push(name);
        } else if let Ok(j) = value_to_json(value, limits.max_value_depth, limits.max_value_bytes) {
            globals.insert(name, j);
        }
    }
    functions.sort();
    let load_output = output.buf.borrow().clone();
    Ok(CompiledPackage {
        package_id: pkg.id.clone(),
        modules,
        top_level: TopLevel::Frozen(frozen),
        load_output,
        globals,
        functions,
    })
}

/// A package whose top level calls a module: its entry points are the
/// public `def`s of its script's top level (what it would export), it has
/// no globals to report (they depend on the invoker) and no load output
/// (its top level prints in every call).
fn per_call_package(
    pkg: &Package,
    modules: ModuleSet,
    loader: &PackageLoader<'_>,
) -> Result<CompiledPackage, starlark::Error> {
    use starlark::syntax::ast::StmtP;
    let ast = loader.parse(&pkg.manifest.script)?;
    let top = ast.statement();
    let statements = match &top.node {
        StmtP::Statements(list) => list.iter().collect(),
        _ => vec![top],
    };
    let mut functions: Vec<String> = statements
        .into_iter()
        .filter_map(|s| match &s.node {
            StmtP::Def(def) => Some(def.name.ident.clone()),
            _ => None,
        })
        .filter(|n| !n.starts_with('_'))
        .collect();
    functions.sort();
    functions.dedup();
    Ok(CompiledPackage {
        package_id: pkg.id.clone(),
        modules,
        top_level: TopLevel::PerCall {
            package: Box::new(pkg.clone()),
            script: Box::new(ast),
        },
        load_output: String::new(),
        globals: serde_json::Map::new(),
        functions,
    })
}

impl CompiledPackage {
    /// Package id.
    pub fn package_id(&self) -> &str {
        &self.package_id
    }
    /// Modules that were present when compiling.
    pub fn modules(&self) -> ModuleSet {
        self.modules
    }
    /// Output printed by the top level (empty when it runs per call: its
    /// output then starts each call's output).
    pub fn load_output(&self) -> &str {
        &self.load_output
    }
    /// Public globals that convert to JSON (functions excluded).
    pub fn globals(&self) -> &serde_json::Map<String, serde_json::Value> {
        &self.globals
    }
    /// Public functions (possible entry points), sorted.
    pub fn functions(&self) -> &[String] {
        &self.functions
    }

    /// Call a public function on a fresh heap with JSON arguments; module
    /// calls go to `calls`. Returns the value and the printed output (the
    /// output is also returned with an error). Recurses: call on a
    /// large-stack thread.
    #[allow(clippy::too_many_arguments)]
    pub fn call(
        &self,
        name: &str,
        args: &[serde_json::Value],
        kwargs: &serde_json::Map<String, serde_json::Value>,
        calls: Arc<dyn ModuleCalls>,
        limits: &EvalLimits,
        deadline: Instant,
        cancel: &CancelToken,
    ) -> Result<(serde_json::Value, String), (EvalFailure, String)> {
        let no_fn = || EvalFailure::NoSuchEntryPoint {
            package: self.package_id.clone(),
            name: name.to_owned(),
            available: self.functions.join(", "),
        };
        let frozen_fn = match &self.top_level {
            TopLevel::Frozen(frozen) => match frozen.get_option(name) {
                Ok(Some(f)) if f.value().get_type() == "function" => Some(f),
                _ => return Err((no_fn(), String::new())),
            },
            TopLevel::PerCall { .. } if self.functions.iter().any(|f| f == name) => None,
            TopLevel::PerCall { .. } => return Err((no_fn(), String::new())),
        };
        let output = CapturedOutput::new(limits.max_output_bytes);
        let guard = Guard {
            limits,
            deadline,
            cancel,
            output: &output,
        };
        let ctx = EvalContext {
            calls,
            max_value_depth: limits.max_value_depth,
            max_value_bytes: limits.max_value_bytes,
            max_heap_bytes: limits.max_heap_bytes,
        };
        let conv = |m: String| EvalFailure::Conversion {
            package: self.package_id.clone(),
            message: m,
        };
        let result = Module::with_temp_heap(|module| {
            let heap = module.heap();
            let mut pos: Vec<Value> = Vec::with_capacity(args.len());
            for a in args {
                pos.push(json_to_value(heap, a, limits.max_value_depth).map_err(conv)?);
            }
            let mut named: Vec<(&str, Value)> = Vec::with_capacity(kwargs.len());
            for (k, v) in kwargs {
                named.push((
                    k.as_str(),
                    json_to_value(heap, v, limits.max_value_depth).map_err(conv)?,
                ));
            }
            // The seed's model for a package whose top level calls a
            // module: the top level runs first, in this call's heap,
            // with this call's modules.
            let loader = match &self.top_level {
                TopLevel::PerCall { package, script } => Some((
                    PackageLoader {
                        pkg: package,
                        globals: globals_for(self.modules),
                        guard: &guard,
                        ctx: &ctx,
                        stack: RefCell::new(vec![package.manifest.script.clone()]),
                        done: RefCell::new(HashMap::new()),
                    },
                    script,
                )),
                TopLevel::Frozen(_) => None,
            };
            let mut eval = Evaluator::new(&module);
            guard
                .configure(&mut eval, &ctx)
                .map_err(|e| guard.classify(&self.package_id, e))?;
            let fv = match (&frozen_fn, &loader) {
                // SAFETY: `owned_frozen_value` adds a reference from this
                // module's frozen heap to the function's heap, so the
                // value stays alive as long as `module` (and the frozen
                // module outlives the call anyway).
                (Some(f), _) => unsafe { f.owned_frozen_value(module.frozen_heap()) }.to_value(),
                (None, Some((loader, script))) => {
                    eval.set_loader(loader);
                    let run = eval.eval_module(script.as_ref().clone(), loader.globals);
                    if let Err(e) = run {
                        drop(eval);
                        return Err(guard.classify(&self.package_id, e));
                    }
                    match module.get(name) {
                        Some(f) if f.get_type() == "function" => f,
                        _ => return Err(no_fn()),
                    }
                }
                (None, None) => return Err(no_fn()),
            };
            let r = eval.eval_function(fv, &pos, &named);
            drop(eval);
            match r {
                Ok(v) => {
                    value_to_json(v, limits.max_value_depth, limits.max_value_bytes).map_err(|e| {
                        match e {
                            JsonError::TooLarge(m) => EvalFailure::Limit {
                                package: self.package_id.clone(),
                                kind: LimitKind::ValueSize,
                                message: format!("return value of {name}: {m}"),
                            },
                            JsonError::NotJson(m) => EvalFailure::Conversion {
                                package: self.package_id.clone(),
                                message: format!("return value of {name}: {m}"),
                            },
                        }
                    })
                }
                Err(e) => Err(guard.classify(&self.package_id, e)),
            }
        });
        let out = output.buf.borrow().clone();
        match result {
            Ok(v) => Ok((v, out)),
            Err(e) => Err((e, out)),
        }
    }
}
