//! OpenAI-compatible chat-completions provider.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::stores::ResolvedProvider;
use cordon_starlark_protocol::{
    ChatMessage, CompletionRequest, CompletionResponse, ModuleError, Usage,
};

/// Wire body of `POST {base_url}/chat/completions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionBody {
    /// Model name.
    pub model: String,
    /// Conversation.
    pub messages: Vec<ChatMessage>,
    /// Token cap.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub max_tokens: Option<u32>,
    /// Temperature.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub temperature: Option<f64>,
}

/// One choice in a chat-completions answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChoice {
    /// The assistant message.
    pub message: ChatMessage,
    /// Why it stopped.
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// Wire answer of chat-completions (the fields we use).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionAnswer {
    /// Model that answered.
    #[serde(default)]
    pub model: String,
    /// Choices; the first is used.
    pub choices: Vec<ChatChoice>,
    /// Token usage.
    #[serde(default)]
    pub usage: Option<Usage>,
}

/// Largest provider answer read.
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// Client for OpenAI-compatible providers. Provider URLs come from the host
/// (the resolver), not from scripts, so they are not subject to the
/// package allowlist; redirects are still not followed.
#[derive(Clone, Debug)]
pub struct OpenAiCompatibleProvider {
    client: reqwest::Client,
    timeout: Duration,
}

impl OpenAiCompatibleProvider {
    /// Build a client with the given per-call timeout.
    pub fn new(timeout: Duration) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot build provider HTTP client: {e}"))?;
        Ok(Self { client, timeout })
    }

    /// Run one completion.
    pub async fn complete(
        &self,
        provider: &ResolvedProvider,
        req: CompletionRequest,
    ) -> Result<CompletionResponse, ModuleError> {
        let cfg = &provider.config;
        let body = ChatCompletionBody {
            model: req.model.clone().unwrap_or_else(|| cfg.model.clone()),
            messages: req.messages,
            max_tokens: req.max_tokens,
            temperature: req.temperature,
        };
        let url = format!("{}/chat/completions", cfg.base_url.trim_end_matches('/'));
        let key = cfg.api_key.expose();
        let redact = |s: String| {
            if key.is_empty() {
                s
            } else {
                s.replace(key, "<redacted>")
            }
        };
        let fut = async {
            let mut resp = self
                .client
                .post(&url)
                .bearer_auth(key)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(serde_json::to_vec(&body).map_err(|e| {
                    ModuleError::InvalidArgument(format!("cannot encode completion request: {e}"))
                })?)
                .send()
                .await
                .map_err(|e| {
                    ModuleError::Upstream(redact(format!("provider request failed: {e}")))
                })?;
            let status = resp.status();
            let mut buf = Vec::new();
            while let Some(chunk) = resp.chunk().await.map_err(|e| {
                ModuleError::Upstream(format!("reading provider answer failed: {e}"))
            })? {
                if buf.len() + chunk.len() > MAX_ANSWER_BYTES {
                    return Err(ModuleError::LimitExceeded(format!(
                        "provider answer is larger than {MAX_ANSWER_BYTES} bytes"
                    )));
                }
                buf.extend_from_slice(&chunk);
            }
            if !status.is_success() {
                let text = String::from_utf8_lossy(&buf);
                let text: String = text.chars().take(300).collect();
                return Err(ModuleError::Upstream(redact(format!(
                    "provider answered HTTP {status}: {text}"
                ))));
            }
            let answer: ChatCompletionAnswer = serde_json::from_slice(&buf).map_err(|e| {
                ModuleError::Upstream(format!("provider answer is not chat-completions JSON: {e}"))
            })?;
            let choice = answer.choices.into_iter().next().ok_or_else(|| {
                ModuleError::Upstream("provider answer has no choices".to_owned())
            })?;
            Ok(CompletionResponse {
                content: choice.message.content,
                model: if answer.model.is_empty() {
                    body.model.clone()
                } else {
                    answer.model
                },
                finish_reason: choice.finish_reason,
                usage: answer.usage,
                key_source: provider.source.as_str().to_owned(),
            })
        };
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(ModuleError::Timeout(format!(
                "provider did not answer within {} ms",
                self.timeout.as_millis()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_starlark_protocol::{ModuleCall, ModuleReply};

    // starlark enables serde_json/arbitrary_precision for the whole build;
    // these round trips make sure our shapes survive it.
    #[test]
    fn provider_types_round_trip_under_arbitrary_precision() {
        let body = ChatCompletionBody {
            model: "m".into(),
            messages: vec![ChatMessage {
                role: "user".into(),
                content: "hi".into(),
            }],
            max_tokens: Some(7),
            temperature: Some(0.25),
        };
        let s = serde_json::to_string(&body).unwrap();
        assert!(s.contains("\"temperature\":0.25"), "{s}");
        let back: ChatCompletionBody = serde_json::from_str(&s).unwrap();
        assert_eq!(back, body);

        let call = ModuleCall::Complete(CompletionRequest {
            messages: body.messages.clone(),
            model: None,
            max_tokens: Some(3),
            temperature: Some(0.7),
        });
        let s = serde_json::to_string(&call).unwrap();
        let back: ModuleCall = serde_json::from_str(&s).unwrap();
        assert_eq!(back, call);
        // Through serde_json::Value as well (what a JSON-lines protocol does).
        let v = serde_json::to_value(&call).unwrap();
        let back: ModuleCall = serde_json::from_value(v).unwrap();
        assert_eq!(back, call);

        let answer = r#"{"id":"x","object":"chat.completion","model":"gpt-x",
            "choices":[{"index":0,"message":{"role":"assistant","content":"yo"},"finish_reason":"stop"}],
            "usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;
        let a: ChatCompletionAnswer = serde_json::from_str(answer).unwrap();
        assert_eq!(a.usage.unwrap().total_tokens, 4);
        let reply = ModuleReply::Completion(CompletionResponse {
            content: "yo".into(),
            model: "gpt-x".into(),
            finish_reason: Some("stop".into()),
            usage: a.usage,
            key_source: "user".into(),
        });
        let back: ModuleReply =
            serde_json::from_str(&serde_json::to_string(&reply).unwrap()).unwrap();
        assert_eq!(back, reply);
    }
}
