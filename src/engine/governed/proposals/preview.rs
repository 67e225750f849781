//! `proposal.preview`: what a revision changes, for humans and tools, in pages. Every part is
//! computed from the revision's checked artifact (never a path the caller names), so two
//! previews of one revision always describe the same bytes.

use super::super::requests::parse_cursor;
use crate::config::Permission;
use crate::domain::claim::Span;
use crate::domain::proposal::is_revision;
use crate::engine::actor::Actor;
use crate::engine::error::ServiceError;
use crate::engine::governed::Proposals;
use crate::limits;
use crate::patch::{ChangeKind, FileChange, Patch};
use crate::wire::{PreviewPart, ProposalPreviewParams};
use crate::wire::{TouchedFile, TouchedSymbol};
use base64::Engine;

fn page(
    limit: Option<u32>,
    default: u32,
    max: u32,
    cursor: Option<&str>,
    prefix: &str,
) -> Result<(u32, usize), ServiceError> {
    let limit = limit.unwrap_or(default);
    if !(1..=max).contains(&limit) {
        return Err(ServiceError::invalid_field(
            "limit",
            format!("limit is {limit}; it must be between 1 and {max}"),
        ));
    }
    let from = parse_cursor(prefix, cursor)?.unwrap_or(0) as usize;
    Ok((limit, from))
}

/// The changed old-side lines of a file as spans (an insertion touches the line before it).
fn changed_spans(f: &FileChange) -> Vec<Span> {
    f.changed
        .iter()
        .map(|r| {
            if r.len == 0 {
                let at = r.start.max(1);
                Span {
                    start: at.saturating_sub(1).max(1),
                    end: at,
                }
            } else {
                Span {
                    start: r.start,
                    end: r.start + r.len - 1,
                }
            }
        })
        .collect()
}

impl Proposals {
    /// `proposal.preview`.
    pub async fn proposal_preview(
        &self,
        actor: &Actor,
        p: ProposalPreviewParams,
    ) -> Result<crate::wire::PreviewReply, ServiceError> {
        let worktree = self
            .ctx
            .governed(actor, &p.workspace_id, Permission::View)?;
        let row = self.proposal_in(&p.workspace_id, &p.proposal_id).await?;
        let revision = p.revision.clone().unwrap_or(row.current_revision.clone());
        if !is_revision(&revision) {
            return Err(ServiceError::invalid_field(
                "revision",
                format!("revision {revision:?} is not a revision digest (64 lowercase hex digits)"),
            ));
        }
        let revisions = self.ctx.data.store.revisions(&row.proposal_id).await?;
        if !revisions.iter().any(|r| r.revision == revision) {
            return Err(ServiceError::NotFound(format!(
                "proposal {} has no revision {revision}",
                row.proposal_id
            )));
        }
        let bytes = self.read_patch(&revision).await?;
        let patch = crate::patch::parse(&bytes).map_err(|e| {
            ServiceError::internal(format!("stored revision {revision} no longer parses: {e}"))
        })?;
        let head = {
            let repo = self.ctx.repo(&p.workspace_id).clone();
            tokio::task::spawn_blocking(move || repo.resolve_commit("HEAD").ok())
                .await
                .expect("rev-parse does not panic")
        };
        let base = Self::record_of(&row)?.base_revision;
        use crate::wire::{
            PreviewBody as B, PreviewDiff, PreviewFiles, PreviewMetadata, PreviewRaw,
        };
        let body = match p.part {
            PreviewPart::Metadata => B::Metadata(PreviewMetadata {
                stale_base: base.as_ref().is_some_and(|b| Some(b) != head.as_ref()),
                base_revision: base,
                worktree_head: head,
                files: patch.files.len() as u64,
                added: patch.files.iter().map(|f| f.added).sum(),
                removed: patch.files.iter().map(|f| f.removed).sum(),
                binary: patch.files.iter().filter(|f| f.binary).count() as u64,
                bytes: bytes.len() as u64,
            }),
            PreviewPart::Files => {
                let (limit, from) = page(
                    p.limit,
                    limits::DEFAULT_LIST_LIMIT,
                    limits::MAX_CLAIM_LIST_LIMIT,
                    p.cursor.as_deref(),
                    "pvf_",
                )?;
                let files: Vec<crate::wire::FileView> = patch
                    .files
                    .iter()
                    .skip(from)
                    .take(limit as usize)
                    .map(crate::wire::FileView::of)
                    .collect();
                let end = from + files.len();
                let more = end < patch.files.len();
                B::Files(PreviewFiles {
                    files,
                    next_cursor: more.then(|| format!("pvf_{end}")),
                })
            }
            PreviewPart::Diff => {
                let (limit, from) = page(
                    p.limit,
                    limits::DEFAULT_PREVIEW_DIFF_LINES,
                    limits::MAX_PREVIEW_DIFF_LINES,
                    p.cursor.as_deref(),
                    "pvd_",
                )?;
                let text = String::from_utf8_lossy(&bytes);
                let all: Vec<&str> = text
                    .strip_suffix('\n')
                    .unwrap_or(&text)
                    .split('\n')
                    .collect();
                let lines: Vec<String> = all
                    .iter()
                    .skip(from)
                    .take(limit as usize)
                    .map(|l| l.to_string())
                    .collect();
                let end = from + lines.len();
                B::Diff(PreviewDiff {
                    lines,
                    first_line: from as u64 + 1,
                    total_lines: all.len() as u64,
                    next_cursor: (end < all.len()).then(|| format!("pvd_{end}")),
                })
            }
            PreviewPart::Raw => B::Raw(PreviewRaw {
                encoding: "base64".into(),
                patch: base64::engine::general_purpose::STANDARD.encode(&bytes),
                sha256: revision.clone(),
                bytes: bytes.len() as u64,
            }),
            PreviewPart::Symbols => B::Symbols(crate::wire::PreviewSymbols {
                files: self.touched_symbols(worktree, &patch).await,
            }),
        };
        Ok(crate::wire::PreviewReply {
            header: crate::wire::PreviewHeader {
                current: revision == row.current_revision,
                proposal_id: row.proposal_id,
                revision,
                part: p.part,
            },
            body,
        })
    }

    /// For each modified file, the declarations of the worktree's current file whose spans
    /// meet the changed lines. A file that cannot be indexed says why; nothing is skipped.
    async fn touched_symbols(
        &self,
        worktree: std::path::PathBuf,
        patch: &Patch,
    ) -> Vec<TouchedFile> {
        let files: Vec<(String, ChangeKind, Vec<Span>)> = patch
            .files
            .iter()
            .filter_map(|f| {
                f.old_path
                    .clone()
                    .or_else(|| f.new_path.clone())
                    .map(|p| (p, f.kind, changed_spans(f)))
            })
            .collect();
        // A file without symbols, and why.
        let none = |path: &str, note: String| TouchedFile {
            path: path.to_string(),
            language: None,
            symbols: vec![],
            note: Some(note),
        };
        tokio::task::spawn_blocking(move || {
            let root = match crate::beneath::Root::open(&worktree) {
                Ok(r) => r,
                Err(e) => {
                    return files
                        .iter()
                        .map(|(path, _, _)| {
                            none(path, format!("the worktree cannot be opened: {e}"))
                        })
                        .collect();
                }
            };
            files
                .into_iter()
                .map(|(path, kind, spans)| {
                    if kind == ChangeKind::Create {
                        return none(&path, "a created file has no current declarations".into());
                    }
                    let Some(lang) = crate::symbols::Language::detect(&path) else {
                        return none(&path, "no parser for this file type".into());
                    };
                    let src = match crate::worktree::source(
                        &root,
                        &path,
                        crate::symbols::MAX_SYMBOL_SOURCE_BYTES,
                    ) {
                        Ok(Some(s)) => s,
                        Ok(None) => {
                            return none(&path, "the file does not exist in the worktree".into());
                        }
                        Err(e) => return none(&path, e.to_string()),
                    };
                    match crate::symbols::symbols(lang, &path, &src) {
                        Err(e) => none(&path, e.to_string()),
                        Ok(all) => {
                            let symbols = all
                                .into_iter()
                                .filter(|s| {
                                    spans
                                        .iter()
                                        .any(|c| c.start <= s.span.end && s.span.start <= c.end)
                                })
                                .map(|s| TouchedSymbol {
                                    resource_id: format!("symbol:{path}#{}", s.name),
                                    name: s.name,
                                    kind: s.kind,
                                    span: s.span,
                                })
                                .collect();
                            TouchedFile {
                                path,
                                language: Some(lang.as_str().to_string()),
                                symbols,
                                note: None,
                            }
                        }
                    }
                })
                .collect()
        })
        .await
        .expect("indexing does not panic")
    }
}
