//! The [`Builder`] of every client, and [`ConfigError`], why one cannot be built.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;

use super::{Api, Client, Reading, Settings, State, base_url};
use crate::transport::TransportError;

/// A client that cannot be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The API key is not set.
    #[error("no API key: set {var} or pass one to the builder")]
    MissingApiKey {
        /// The environment variable that would have held it.
        var: &'static str,
    },
    /// The base URL is not an absolute `http(s)://` URL.
    #[error("invalid base URL {url:?}: {reason}")]
    InvalidBaseUrl {
        /// The URL given, its password and the key masked.
        url: String,
        /// Why it does not work.
        reason: String,
    },
    /// The HTTP client could not be set up.
    #[error("cannot set up the HTTP client: {0}")]
    Transport(#[from] TransportError),
    /// An extra header cannot be sent, or names one the client sets itself.
    #[error("invalid header {name:?}: {reason}")]
    InvalidHeader {
        /// The header's name, as given (never its value).
        name: String,
        /// Why it cannot be sent.
        reason: String,
    },
}

/// Builds a [`Client`] of the API `A`: [`OpenAiBuilder`](crate::openai::OpenAiBuilder)
/// and [`AnthropicBuilder`](crate::anthropic::AnthropicBuilder) are this type. The
/// settings here are every API's; each API's own are in its module.
pub struct Builder<A: Api> {
    pub(crate) settings: Settings,
    pub(crate) options: A::Options,
    api: PhantomData<fn() -> A>,
}

impl<A: Api> Default for Builder<A> {
    fn default() -> Self {
        Self {
            settings: Settings::default(),
            options: A::Options::default(),
            api: PhantomData,
        }
    }
}

impl<A: Api> std::fmt::Debug for Builder<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("api", &A::NAME)
            .field("settings", &self.settings)
            .field("options", &self.options)
            .finish()
    }
}

impl<A: Api> Builder<A> {
    /// A builder with the base URL and the API key from the API's environment variables
    /// (`OPENAI_BASE_URL` and `OPENAI_API_KEY`, `ANTHROPIC_BASE_URL` and
    /// `ANTHROPIC_API_KEY`), each when set and not blank, and whatever else the API
    /// reads from the environment (its module says what); the other settings can still
    /// be changed.
    pub fn from_env() -> Self {
        let mut builder = Self {
            settings: Settings::from_env(A::BASE_URL_VAR, A::API_KEY_VAR),
            ..Self::default()
        };
        A::from_env(&mut builder.settings, &mut builder.options);
        builder
    }

    /// A header sent with every request (`anthropic-beta`, a gateway's own). Its value
    /// is treated as a secret: never shown in `Debug` output. Building fails when the
    /// name or value cannot be sent, or names one the client sets itself (its
    /// credential and version headers, `content-type`): [`ConfigError::InvalidHeader`].
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings
            .headers
            .push((name.into(), SecretString::from(value.into())));
        self
    }

    /// The base URL, as the API's own SDKs take it: OpenAI's includes `/v1`
    /// (`http://localhost:11434/v1` for Ollama), Anthropic's does not.
    #[must_use]
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.settings.base_url = Some(url.into());
        self
    }

    /// The API key: OpenAI's is sent as `Authorization: Bearer …`, Anthropic's as
    /// `x-api-key`.
    #[must_use]
    pub fn api_key(mut self, key: impl Into<SecretString>) -> Self {
        self.settings.api_key = Some(key.into());
        self
    }

    /// A limit on each whole call (connect, send, wait, read); none by default. Timeouts
    /// are retryable ([`RetryPolicy`](crate::retry::RetryPolicy)).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = Some(timeout);
        self
    }

    /// The most bytes of a response body the client reads (default
    /// [`DEFAULT_MAX_RESPONSE_BYTES`](crate::transport::DEFAULT_MAX_RESPONSE_BYTES),
    /// 16 MiB). A longer body is a [`ResponseTooLarge`] error, not retried; the default
    /// transport stops reading at the limit, so it never holds more.
    ///
    /// [`ResponseTooLarge`]: crate::ProviderErrorKind::ResponseTooLarge
    #[must_use]
    pub fn max_response_bytes(mut self, limit: usize) -> Self {
        self.settings.max_response_bytes = limit;
        self
    }

    /// The client, over reqwest (following no redirect). Fails with an invalid base URL
    /// or header, or without a credential where the API needs one
    /// ([`ConfigError::MissingApiKey`]).
    pub fn build(self) -> Result<Client<A>, ConfigError> {
        let transport = self.settings.transport()?;
        self.build_with_transport(transport)
    }

    /// The client over another transport (the timeout setting is then the transport's
    /// business; the body limit is still checked on the body it returns).
    pub fn build_with_transport<T>(self, transport: T) -> Result<Client<A, T>, ConfigError> {
        let redactor = self
            .settings
            .redactor(A::DEFAULT_BASE_URL)
            .with_secret(A::secret(&self.options));
        let url = base_url(
            self.settings
                .base_url
                .as_deref()
                .unwrap_or(A::DEFAULT_BASE_URL),
            &redactor,
        )?;
        A::check(&self.settings, &self.options, &url)?;
        let headers = self.settings.header_map(A::OWN_HEADERS)?;
        Ok(Client {
            transport,
            state: Arc::new(State {
                endpoint: format!("{url}{}", A::PATH),
                shown_url: redactor.url(&url),
                base_url: url,
                api_key: self.settings.api_key,
                headers,
                options: self.options,
                reading: Reading {
                    redactor,
                    max_response_bytes: self.settings.max_response_bytes,
                },
            }),
        })
    }
}
