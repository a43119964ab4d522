//! `switchboard tokens list|revoke`: the operator's view of callers' upstream tokens. With a
//! session store (Redis) and a token key file, it reads the store directly; otherwise the
//! tokens live in the running gateway's memory only, which no other process can read: said
//! plainly, with a non-zero exit.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use clap::{Args, Subcommand};

use switchboard_store::{RedisStore, RedisTokenVault};
use switchboard_upstream::outgoing_auth::{TokenSummary, TokenVault, VaultKey, VaultKeyMaterial};

/// `switchboard tokens`.
#[derive(Debug, Args)]
pub(crate) struct TokensCmdArgs {
    /// The gateway's config file (its `sessionStore` and `tokenStore`).
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// The session store, as `--session-store` (instead of, or over, the config file's).
    #[arg(long, value_name = "URL")]
    pub(crate) session_store: Option<String>,
    /// A file whose first line is the session store's password (mode 0600); or
    /// `SWITCHBOARD_SESSION_STORE_PASSWORD`.
    #[arg(long, value_name = "FILE")]
    pub(crate) session_store_password_file: Option<PathBuf>,
    /// The session store's key prefix (default: the config file's, else `switchboard`).
    #[arg(long, value_name = "PREFIX")]
    pub(crate) session_store_prefix: Option<String>,
    /// The token store's key file, as `--token-store-key-file`.
    #[arg(long, value_name = "FILE")]
    pub(crate) token_store_key_file: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) action: TokensAction,
}

#[derive(Debug, Subcommand)]
pub(crate) enum TokensAction {
    /// Every stored token: principal, backend, expiry, scope, issuer (never a token).
    List {
        /// One JSON document instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Remove PRINCIPAL's token for BACKEND (the principal as `tokens list` shows it); the
    /// caller is asked for consent again at its next call.
    Revoke {
        #[arg(long, value_name = "PRINCIPAL")]
        principal: String,
        #[arg(long, value_name = "BACKEND")]
        backend: String,
    },
}

/// Where the tokens are, as the arguments and the config file say.
struct Located {
    url: String,
    password_file: Option<PathBuf>,
    prefix: String,
    key_file: PathBuf,
}

const IN_MEMORY: &str = "tokens live in the running gateway's memory (no sessionStore with a tokenStore.encryptionKeyFile): no other process can read or revoke them, and they are lost when it restarts. A caller removes its own with DELETE /oauth/tokens/BACKEND; configure sessionStore and tokenStore to manage them here";

fn locate(args: &TokensCmdArgs) -> anyhow::Result<Located> {
    let (mut url, mut password_file, mut prefix, mut key_file) = (None, None, None, None);
    if let Some(path) = &args.config {
        let loaded = crate::config::load(path)?;
        if let Some(s) = &loaded.file.session_store {
            url = Some(s.url.clone());
            password_file = s.password_file.as_ref().map(|p| loaded.resolved.path(p));
            prefix.clone_from(&s.key_prefix);
        }
        key_file = loaded.resolved.token_key_file.clone();
    }
    url = args.session_store.clone().or(url);
    password_file = args.session_store_password_file.clone().or(password_file);
    prefix = args.session_store_prefix.clone().or(prefix);
    key_file = args.token_store_key_file.clone().or(key_file);
    match (url, key_file) {
        (Some(url), Some(key_file)) => Ok(Located {
            url,
            password_file,
            prefix: prefix.unwrap_or_else(|| "switchboard".to_owned()),
            key_file,
        }),
        _ => bail!("{IN_MEMORY}"),
    }
}

async fn open(args: &TokensCmdArgs) -> anyhow::Result<RedisTokenVault> {
    let at = locate(args)?;
    let key = VaultKeyMaterial::from_file(&at.key_file).map_err(|e| anyhow!("{e}"))?;
    let password = match &at.password_file {
        Some(path) => crate::session_store::private_first_line(path)?,
        None => {
            crate::config_vars::var(crate::session_store::PASSWORD_ENV).filter(|p| !p.is_empty())
        }
    };
    let store = RedisStore::new(&at.url, password, &at.prefix, Duration::from_secs(60))
        .map_err(|e| anyhow!("session store: {e}"))?;
    store
        .ping()
        .await
        .map_err(|e| anyhow!("session store {} not answering: {e}", store.shown()))?;
    Ok(RedisTokenVault::new(&store, key))
}

/// Runs `switchboard tokens`.
pub(crate) async fn run(args: TokensCmdArgs) -> anyhow::Result<()> {
    let vault = open(&args).await?;
    match &args.action {
        TokensAction::List { json } => {
            let tokens = vault.list(None).await.context("listing tokens")?;
            if *json {
                println!("{}", serde_json::json!({ "tokens": tokens }));
            } else {
                print!("{}", lines(&tokens));
            }
            Ok(())
        }
        TokensAction::Revoke { principal, backend } => {
            let key = VaultKey::new(principal.clone(), backend.clone());
            if vault.remove(&key).await.context("revoking")? {
                println!("revoked {principal}'s token for {backend}");
                Ok(())
            } else {
                bail!("no token is stored for {principal} at {backend} (see `switchboard tokens list`)")
            }
        }
    }
}

fn lines(tokens: &[TokenSummary]) -> String {
    if tokens.is_empty() {
        return "no tokens stored\n".to_owned();
    }
    tokens
        .iter()
        .map(|t| {
            let expires = t.expires_at.map_or("never".to_owned(), |e| e.to_string());
            format!(
                "{}\t{}\texpires_at={expires}\trefreshable={}\tscope={}\tissuer={}\n",
                shown(&t.principal),
                shown(&t.backend),
                t.refreshable,
                shown(t.scope.as_deref().unwrap_or("-")),
                shown(&t.issuer)
            )
        })
        .collect()
}

/// `text` (an authorization server's scope or issuer, a caller's subject) safe for a
/// terminal and for a column: control characters (tabs and newlines, escape sequences),
/// line and paragraph separators, bidirectional overrides and zero-width characters are
/// written as `\u{..}`, and a backslash is doubled (so no escape can be forged).
fn shown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let hidden = c.is_control()
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}');
        if c == '\\' {
            out.push_str("\\\\");
        } else if hidden {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an authorization server wrote in `scope` (or a subject in the principal) cannot
    /// move the terminal's cursor, recolour it, forge a line or shift the columns.
    #[test]
    fn listed_fields_are_escaped() {
        let t = TokenSummary {
            principal: "3:iss:al\u{202e}ice".into(),
            backend: "gh".into(),
            expires_at: None,
            scope: Some("repo\u{1b}[2J\r\nroot\tgh\texpires_at=never \\x".into()),
            issuer: "https://as\u{7}.example".into(),
            refreshable: true,
        };
        let out = lines(&[t]);
        assert_eq!(out.matches('\n').count(), 1, "{out:?}");
        assert_eq!(out.matches('\t').count(), 5, "{out:?}");
        assert!(!out.contains('\u{1b}') && !out.contains('\r') && !out.contains('\u{7}'));
        assert!(!out.contains('\u{202e}'), "{out:?}");
        assert!(
            out.contains(
                "scope=repo\\u{1b}[2J\\u{d}\\u{a}root\\u{9}gh\\u{9}expires_at=never \\\\x\t"
            ),
            "{out:?}"
        );
        assert!(out.starts_with("3:iss:al\\u{202e}ice\tgh\t"), "{out:?}");
        assert_eq!(shown("plain repo:read"), "plain repo:read");
    }
}
