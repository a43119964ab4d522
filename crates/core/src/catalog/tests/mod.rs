//! Unit tests of the catalog, one file per area: naming, conflict strategies and determinism
//! (`merge`); filters and overrides (`rules`); paging, cursors, resources and templates,
//! capabilities, instructions and parameter rewriting (`more`).

mod merge;
mod more;
mod rules;
