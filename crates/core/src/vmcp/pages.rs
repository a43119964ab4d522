//! Every page of one backend's list, bounded in pages and items.

use serde_json::Value;

use crate::catalog::Kind;
use crate::send::Sender;
use crate::{BackendId, Backends};

/// Pages of one backend's list read at most (a backend paginating forever must not stall
/// the list of every caller).
const MAX_PAGES: usize = 50;

/// Items of one backend's list kept at most: a longer list is a failed fetch (merging is
/// superlinear in hostile inputs, and every caller's list would carry it).
const MAX_ITEMS: usize = 10_000;

/// Every page of `backend`'s list of `kind`, through the gateway's own route; nothing
/// for a kind the backend did not declare (a tools-only server answers `prompts/list`
/// with an error, which is not a failure).
pub(super) async fn fetch_list(
    sender: &Sender,
    backends: &Backends,
    backend: &BackendId,
    kind: Kind,
) -> Result<Vec<Value>, String> {
    let family = match kind {
        Kind::Tools => "tools",
        Kind::Prompts => "prompts",
        Kind::Resources | Kind::ResourceTemplates => "resources",
    };
    let entry = backends.get(backend);
    let Some(entry) = entry.filter(|b| b.info().capabilities.get(family).is_some()) else {
        return Ok(Vec::new());
    };
    let method = kind.list_method();
    let page = |cursor: Option<String>| async move {
        (sender.list_page(backends, backend, method, cursor.as_deref())).await
    };
    let mut items = every_page(kind, page).await?;
    // A backend with replicas runs no tool as a task, whatever its tools say.
    if kind == Kind::Tools && !entry.keeps_tasks() {
        crate::tasks::strip_task_support(&mut items);
    }
    Ok(items)
}

/// The items of every page of a list of `kind`, each page answered by `page(cursor)`: at
/// most [`MAX_PAGES`] pages and [`MAX_ITEMS`] items, or the list is a failed fetch.
pub(super) async fn every_page<F, P>(kind: Kind, mut page: F) -> Result<Vec<Value>, String>
where
    F: FnMut(Option<String>) -> P,
    P: std::future::Future<Output = Result<Value, String>>,
{
    let method = kind.list_method();
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let mut answer = page(cursor.take()).await?;
        if let Some(Value::Array(list)) = answer.get_mut(kind.result_key()).map(Value::take) {
            items.extend(list);
        }
        if items.len() > MAX_ITEMS {
            return Err(format!("{method} has more than {MAX_ITEMS} items"));
        }
        cursor = answer["nextCursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            return Ok(items);
        }
    }
    Err(format!("{method} has more than {MAX_PAGES} pages"))
}
