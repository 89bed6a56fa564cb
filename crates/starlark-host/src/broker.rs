//! Capability implementation: performs module calls with every check.
//! Independent of Starlark, so a sandboxed worker's calls can be served by
//! the same code on the host side.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use cordon_core::explain::{DenialKind, DenialLog, Remedy};
use cordon_egress::{Advice, Allowlist, IpRange};

use cordon_starlark_protocol::{
    EvalLimits, HttpLimits, Manifest, ModuleCall, ModuleCalls, ModuleError, ModuleReply, ModuleSet,
    Notification, NotificationLimits, Package, PackageStatus, PackageTier, Permission,
};
use cordon_starlark_worker::CancelToken;

use crate::error::StarlarkHostError;
use crate::grants::{check_grants, targets};
use crate::http::HttpClient;
use crate::provider::OpenAiCompatibleProvider;
use crate::stores::{
    NotificationSender, PackageStore, PermissionStore, ProviderResolver, RunContext, SecretStore,
};

/// Host services used by module calls. Missing optional services make the
/// corresponding module absent.
#[derive(Clone)]
pub struct Services {
    /// Package registrations: where an embedder keeps its packages (the
    /// host itself is handed each package it runs).
    pub packages: Arc<dyn PackageStore>,
    /// Grants.
    pub permissions: Arc<dyn PermissionStore>,
    /// Secrets; without it `secrets` is absent.
    pub secrets: Option<Arc<dyn SecretStore>>,
    /// Notifications; without it `notifications` is absent.
    pub notifier: Option<Arc<dyn NotificationSender>>,
    /// Provider keys; without it `provider` is absent.
    pub providers: Option<Arc<dyn ProviderResolver>>,
    /// Timeout of one `provider.complete` call.
    pub provider_timeout: Duration,
    /// CA certificates (PEM) the `http` module trusts besides the WebPKI
    /// roots: a private API's CA (`cordon star run --upstream-ca`).
    pub http_roots_pem: Option<Arc<Vec<u8>>>,
}

impl Services {
    /// Services with the given package and permission stores and nothing else.
    pub fn new(packages: Arc<dyn PackageStore>, permissions: Arc<dyn PermissionStore>) -> Self {
        Services {
            packages,
            permissions,
            secrets: None,
            notifier: None,
            providers: None,
            provider_timeout: Duration::from_secs(60),
            http_roots_pem: None,
        }
    }
}

/// Long-lived capability state: services plus the shared provider client
/// (the `http` module's client is per invocation: it is built for the
/// package's allowlist).
pub struct Capabilities {
    services: Services,
    provider: OpenAiCompatibleProvider,
}

/// What one invocation of a package may use, as the host admitted it: its
/// modules, and the private ranges its grants approved for `http`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Admitted {
    /// The modules present.
    pub modules: ModuleSet,
    /// Ranges the package's `http` targets may be in or resolve into.
    pub private: Vec<IpRange>,
}

impl From<ModuleSet> for Admitted {
    fn from(modules: ModuleSet) -> Self {
        Admitted {
            modules,
            private: Vec::new(),
        }
    }
}

/// The `http` allowlist of package `id`: its `network_access` targets in
/// the one grammar, the ranges its grant approved, and refusals that say
/// what its author and its operator can do.
pub(crate) fn package_allowlist(
    id: &str,
    network_access: &[String],
    private: &[IpRange],
) -> Result<Allowlist, String> {
    let mut manifest = Manifest::minimal(id, "main.star");
    manifest.network_access = network_access.to_vec();
    let advice = Advice {
        list: format!("package {id:?}'s network_access"),
        add_target: "add \"{target}\" to network_access in package.toml (the operator then \
                     grants api.http again)"
            .into(),
        allow_private: format!(
            "the operator approves it when granting: cordon star grant {id} api.http"
        ),
    };
    Ok(Allowlist::for_package(
        targets(&manifest)?,
        private.iter().copied(),
        advice,
    ))
}

impl std::fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Capabilities")
    }
}

impl Capabilities {
    /// Build the clients. Fails only if the TLS stack cannot initialise.
    pub fn new(services: Services) -> Result<Arc<Self>, StarlarkHostError> {
        let provider = OpenAiCompatibleProvider::new(services.provider_timeout)
            .map_err(StarlarkHostError::Internal)?;
        Ok(Arc::new(Capabilities { services, provider }))
    }

    /// The services.
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// Which modules a package gets for this invocation: granted AND
    /// requested AND backed by a configured service (and, for `provider`,
    /// a user in the context and a `requires_provider` in the manifest).
    pub async fn module_set(
        &self,
        pkg: &Package,
        ctx: Option<&RunContext>,
    ) -> Result<ModuleSet, StarlarkHostError> {
        Ok(self.admit(pkg, ctx).await?.modules)
    }

    /// What the package may use in this invocation: [`Capabilities::module_set`]'s
    /// modules and the private ranges approved for `http`. A grant whose
    /// package now asks for more than it approved (an upgrade that added
    /// targets, say) refuses the invocation: the package must run neither
    /// with what nobody approved nor, silently, without a module it expects.
    pub async fn admit(
        &self,
        pkg: &Package,
        ctx: Option<&RunContext>,
    ) -> Result<Admitted, StarlarkHostError> {
        let grants = self
            .services
            .permissions
            .grants_for_package(&pkg.id)
            .await
            .map_err(StarlarkHostError::Store)?;
        let granted = check_grants(&grants, &pkg.manifest)
            .map_err(|e| StarlarkHostError::InvalidPackage(format!("package {:?}: {e}", pkg.id)))?
            .map_err(|s| StarlarkHostError::GrantSuspended {
                package: pkg.id.clone(),
                permission: s.permission,
                reason: s.reason,
            })?;
        let has = |p: Permission| granted.permissions.contains(&p) && pkg.manifest.requests(p);
        let user = ctx
            .and_then(|c| c.user_id.as_deref())
            .is_some_and(|u| !u.is_empty());
        let modules = ModuleSet {
            secrets: has(Permission::SecretsRead) && self.services.secrets.is_some(),
            notifications: has(Permission::NotificationsSend) && self.services.notifier.is_some(),
            http: has(Permission::ApiHttp),
            provider: has(Permission::ProviderComplete)
                && self.services.providers.is_some()
                && user
                && pkg.manifest.requires_provider.is_some(),
        };
        Ok(Admitted {
            modules,
            private: if modules.http {
                granted.private
            } else {
                Vec::new()
            },
        })
    }
}

/// Checks that a package may run at all.
pub fn ensure_runnable(pkg: &Package) -> Result<(), StarlarkHostError> {
    if pkg.status != PackageStatus::Active {
        return Err(StarlarkHostError::NotRunnable {
            id: pkg.id.clone(),
            reason: format!("status is {:?}; activate it first", pkg.status),
        });
    }
    if pkg.tier != PackageTier::Starlark {
        return Err(StarlarkHostError::NotRunnable {
            id: pkg.id.clone(),
            reason: format!("tier is {:?}, not Starlark", pkg.tier),
        });
    }
    Ok(())
}

/// Serves module calls for one invocation of one package, with permission
/// gating, allowlist, address guard and caps. Implements [`ModuleCalls`]
/// for in-process runs; a worker-facing host calls [`ModuleBroker::handle`].
pub struct ModuleBroker {
    caps: Arc<Capabilities>,
    package: Package,
    modules: ModuleSet,
    allowlist: Allowlist,
    /// The `http` client for `allowlist`, made on the first request.
    http: OnceLock<Result<HttpClient, String>>,
    /// The package's credentials with their values, read on the first
    /// `http` call.
    credentials: tokio::sync::OnceCell<Result<Arc<Vec<crate::credentials::Credential>>, String>>,
    ctx: RunContext,
    http_limits: HttpLimits,
    http_budget: AtomicU32,
    notify_limits: NotificationLimits,
    notify_sent: AtomicU32,
    notify_bytes: AtomicUsize,
    deadline: Instant,
    cancel: CancelToken,
    runtime: tokio::runtime::Handle,
    /// What this invocation's calls were refused, for the outcome
    /// (`CallOutcome::denials`).
    refusals: DenialLog,
}

impl std::fmt::Debug for ModuleBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleBroker")
            .field("package", &self.package.id)
            .field("modules", &self.modules)
            .finish()
    }
}

impl ModuleBroker {
    /// A broker for one invocation. `admitted` should come from
    /// [`Capabilities::admit`]; calls to modules outside it are refused.
    /// Must be called inside a tokio runtime (its handle is kept for the
    /// blocking [`ModuleCalls`] implementation, which must then be used from
    /// a non-runtime thread such as the evaluation thread).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        caps: Arc<Capabilities>,
        package: &Package,
        admitted: Admitted,
        ctx: Option<&RunContext>,
        limits: &EvalLimits,
        deadline: Instant,
        cancel: CancelToken,
    ) -> Result<Self, StarlarkHostError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            StarlarkHostError::Internal(
                "ModuleBroker::new must be called from inside a tokio runtime".to_owned(),
            )
        })?;
        let allowlist = package_allowlist(
            &package.id,
            &package.manifest.network_access,
            &admitted.private,
        )
        .map_err(|e| StarlarkHostError::InvalidPackage(format!("package {:?}: {e}", package.id)))?;
        Ok(ModuleBroker {
            caps,
            package: package.clone(),
            modules: admitted.modules,
            allowlist,
            http: OnceLock::new(),
            credentials: tokio::sync::OnceCell::new(),
            ctx: ctx.cloned().unwrap_or_default(),
            http_budget: AtomicU32::new(limits.http.max_requests_per_invocation),
            http_limits: limits.http.clone(),
            notify_limits: limits.notifications.clone(),
            notify_sent: AtomicU32::new(0),
            notify_bytes: AtomicUsize::new(0),
            deadline,
            cancel,
            runtime,
            refusals: DenialLog::new(),
        })
    }

    /// Modules this broker serves.
    pub fn modules(&self) -> ModuleSet {
        self.modules
    }

    /// Perform one call (async). Checks the module set again, so a
    /// forwarder cannot call a module the package was not given. A call
    /// refused by a grant, the allowlist or a limit is recorded for
    /// [`ModuleBroker::refusals`].
    pub async fn handle(&self, call: ModuleCall) -> Result<ModuleReply, ModuleError> {
        let name = call.name();
        let target = match &call {
            ModuleCall::Http(req) => Some(req.url.clone()),
            _ => None,
        };
        let r = self.serve(call).await;
        if let Err(e) = &r {
            self.record(name, target.as_deref(), e);
        }
        r
    }

    /// What this invocation's module calls were refused so far, bounded
    /// and escaped like a sandbox's (`cordon_core::explain`).
    pub fn refusals(&self) -> &DenialLog {
        &self.refusals
    }

    /// Records a refusal: a module the package was not given, a host its
    /// `network_access` does not list (or an address the guard refuses),
    /// a per-invocation limit. Other failures (bad arguments, a service
    /// down) are the script's or the service's, not a denial.
    fn record(&self, call: &str, url: Option<&str>, e: &ModuleError) {
        let module = call.split('.').next().unwrap_or(call);
        match e {
            ModuleError::PermissionDenied(_) => {
                let remedy = self
                    .modules
                    .with_permissions()
                    .into_iter()
                    .find(|(name, present, _)| *name == module && !present)
                    .map_or(Remedy::None, |(_, _, p)| {
                        Remedy::GrantPermission(p.to_string())
                    });
                self.refusals
                    .record(DenialKind::Module, call, "call", remedy);
            }
            ModuleError::NetworkDenied(why) => {
                let (object, remedy) = match url.and_then(|u| self.unlisted(u)) {
                    Some((target, entry, private)) => (
                        format!(
                            "{target} (not in the package's network_access{})",
                            if private {
                                "; a private address also needs its range approved by the \
                                 operator"
                            } else {
                                ""
                            }
                        ),
                        Remedy::AllowHost(entry),
                    ),
                    // A request rule's refusal names the rule to add.
                    None => match why
                        .rsplit_once("(add \"")
                        .and_then(|(_, rest)| rest.split_once("\" to network_access)"))
                    {
                        Some((rule, _)) => (why.clone(), Remedy::AllowRequest(rule.to_owned())),
                        None => (why.clone(), Remedy::None),
                    },
                };
                self.refusals
                    .record(DenialKind::Network, &object, "connect", remedy);
            }
            ModuleError::LimitExceeded(why) => {
                let remedy = why
                    .rsplit_once("(EvalLimits::")
                    .and_then(|(_, rest)| rest.split_once(')'))
                    .map_or(Remedy::None, |(field, _)| {
                        Remedy::RaiseLimit(format!("EvalLimits::{field}"))
                    });
                self.refusals
                    .record(DenialKind::Limit, why, "refused", remedy);
            }
            _ => {}
        }
    }

    /// For a URL whose host and port no entry of the allowlist matches:
    /// `host:port`, the entry that would allow the request, and whether
    /// the host is a private address or `localhost` (which a package's
    /// entry reaches only in a range the operator approved).
    fn unlisted(&self, url: &str) -> Option<(String, String, bool)> {
        use cordon_egress::TargetHost;
        let url = url::Url::parse(url).ok()?;
        let (host, port, access) = crate::http::target_of(&url).ok()?;
        self.allowlist.match_target(&host, port, access).err()?;
        let entry = match access {
            cordon_egress::Access::Http => format!("http://{host}:{port}"),
            _ => format!("{host}:{port}"),
        };
        let private = match &host {
            TargetHost::Ip(ip) => cordon_egress::address_class(*ip).is_some(),
            TargetHost::Name(n) => n == "localhost",
        };
        Some((format!("{host}:{port}"), entry, private))
    }

    async fn serve(&self, call: ModuleCall) -> Result<ModuleReply, ModuleError> {
        let pkg = &self.package.id;
        let denied = |m: &str, p: Permission| {
            Err(ModuleError::PermissionDenied(format!(
                "package {pkg:?} was not given the {m} module; it needs {p} requested in package.toml and granted by the host"
            )))
        };
        tracing::debug!(package = %pkg, call = call.name(), "module call");
        match call {
            ModuleCall::SecretGet(g) => {
                if !self.modules.secrets {
                    return denied("secrets", Permission::SecretsRead);
                }
                let store =
                    self.caps.services.secrets.as_ref().ok_or_else(|| {
                        ModuleError::Unavailable("no secret store configured".into())
                    })?;
                // The namespace is always the broker's package, never the script's choice.
                let v = store
                    .get(pkg, &g.name)
                    .await
                    .map_err(ModuleError::Unavailable)?;
                Ok(ModuleReply::Secret(v))
            }
            ModuleCall::Notify(mut n) => {
                if !self.modules.notifications {
                    return denied("notifications", Permission::NotificationsSend);
                }
                let sender = self.caps.services.notifier.as_ref().ok_or_else(|| {
                    ModuleError::Unavailable("no notification sender configured".into())
                })?;
                n.package_id = pkg.clone();
                n.user_id = self.ctx.user_id.clone();
                n.channel_id = self.ctx.channel_id.clone();
                self.take_notification_budget(&n)?;
                sender.send(&n).await.map_err(ModuleError::Upstream)?;
                Ok(ModuleReply::Notified)
            }
            ModuleCall::Http(req) => {
                if !self.modules.http {
                    return denied("http", Permission::ApiHttp);
                }
                let client = self
                    .http
                    .get_or_init(|| {
                        let rules = crate::grants::rules(&self.package.manifest.network_access);
                        let roots = self.caps.services.http_roots_pem.as_deref();
                        HttpClient::new(self.allowlist.clone(), rules, roots.map(Vec::as_slice))
                    })
                    .as_ref()
                    .map_err(|e| ModuleError::Unavailable(e.clone()))?;
                let creds = self
                    .credentials
                    .get_or_init(|| async {
                        crate::credentials::resolve(
                            pkg,
                            &self.package.manifest,
                            self.caps.services.secrets.as_ref(),
                        )
                        .await
                        .map(Arc::new)
                    })
                    .await
                    .clone()
                    .map_err(ModuleError::Unavailable)?;
                let r = client
                    .execute(&self.http_limits, req, &self.http_budget, &creds)
                    .await;
                if let Err(e) = &r {
                    tracing::info!(package = %pkg, error = %e, "http call refused or failed");
                }
                r.map(ModuleReply::Http)
            }
            ModuleCall::Complete(req) => {
                if !self.modules.provider {
                    return denied("provider", Permission::ProviderComplete);
                }
                let user = self
                    .ctx
                    .user_id
                    .as_deref()
                    .filter(|u| !u.is_empty())
                    .ok_or_else(|| {
                        ModuleError::PermissionDenied(
                            "provider.complete needs a user in the run context".into(),
                        )
                    })?;
                let resolver = self.caps.services.providers.as_ref().ok_or_else(|| {
                    ModuleError::Unavailable("no provider resolver configured".into())
                })?;
                let requirement = self
                    .package
                    .manifest
                    .requires_provider
                    .clone()
                    .unwrap_or_default();
                let resolved = resolver
                    .resolve(user, self.ctx.channel_id.as_deref(), pkg, &requirement)
                    .await
                    .map_err(ModuleError::Unavailable)?
                    .ok_or_else(|| {
                        ModuleError::Unavailable(
                            "no provider key is configured for this user, channel, package or host"
                                .into(),
                        )
                    })?;
                tracing::debug!(package = %pkg, key_source = resolved.source.as_str(), "provider resolved");
                self.caps
                    .provider
                    .complete(&resolved, req)
                    .await
                    .map(ModuleReply::Completion)
            }
        }
    }
}

impl ModuleBroker {
    /// Counts `n` against the invocation's notification budget
    /// ([`NotificationLimits`]), or refuses it: the host keeps (and a sink
    /// queues) at most that much per invocation.
    fn take_notification_budget(&self, n: &Notification) -> Result<(), ModuleError> {
        let l = &self.notify_limits;
        let bytes =
            n.title.len() + n.body.len() + n.level.len() + n.url.as_ref().map_or(0, String::len);
        if bytes > l.max_bytes {
            return Err(ModuleError::LimitExceeded(format!(
                "this notification has {bytes} bytes, more than the {}-byte limit per notification \
                 (EvalLimits::notifications.max_bytes)",
                l.max_bytes
            )));
        }
        self.notify_sent
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |sent| {
                (sent < l.max_per_invocation).then_some(sent + 1)
            })
            .map_err(|_| {
                ModuleError::LimitExceeded(format!(
                    "more than {} notifications in one invocation \
                     (EvalLimits::notifications.max_per_invocation)",
                    l.max_per_invocation
                ))
            })?;
        self.notify_bytes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |total| {
                total
                    .checked_add(bytes)
                    .filter(|t| *t <= l.max_bytes_per_invocation)
            })
            .map_err(|_| {
                ModuleError::LimitExceeded(format!(
                    "the notifications of this invocation would pass {} bytes \
                     (EvalLimits::notifications.max_bytes_per_invocation)",
                    l.max_bytes_per_invocation
                ))
            })?;
        Ok(())
    }
}

impl ModuleCalls for ModuleBroker {
    fn call(&self, call: ModuleCall) -> Result<ModuleReply, ModuleError> {
        if self.cancel.is_cancelled() {
            return Err(ModuleError::Cancelled);
        }
        let now = Instant::now();
        if now >= self.deadline {
            return Err(ModuleError::Timeout(
                "the invocation deadline has passed".into(),
            ));
        }
        let remaining = self.deadline - now;
        // Called on the evaluation thread (never a runtime worker), so
        // blocking on the runtime handle is allowed.
        self.runtime.block_on(async {
            tokio::select! {
                r = self.handle(call) => r,
                _ = tokio::time::sleep(remaining) => Err(ModuleError::Timeout(format!(
                    "the invocation deadline was reached during the call ({} ms left when it started)",
                    remaining.as_millis()
                ))),
                _ = self.cancel.cancelled() => Err(ModuleError::Cancelled),
            }
        })
    }
}
