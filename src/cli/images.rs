//! `airlock images build` and `airlock images push`: the sandbox images are Docker images
//! (built from `images/` by this machine's engine, copied to `[[engines]]` over the Docker
//! API), so this command talks to the Docker backend itself, not through the runtime seam.

use super::{Common, fail, load, print_json, refuse};
use crate::sandbox::docker::{DockerRuntime, images};
use std::path::Path;
use std::process::ExitCode;

/// The images directory: the one named (flag or AIRLOCK_IMAGES_DIR), else `./images`, else the
/// `images/` of the checkout this binary was built in (`<checkout>/target/<profile>/airlock`),
/// so the command does not depend on the directory it is run from.
pub(super) fn images_dir(named: Option<std::path::PathBuf>) -> Result<std::path::PathBuf, String> {
    if let Some(d) = named {
        return if d.is_dir() {
            Ok(d)
        } else {
            Err(format!("--images-dir {}: not a directory", d.display()))
        };
    }
    let here = std::path::PathBuf::from("images");
    let built_in = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.join("images")));
    let tried: Vec<std::path::PathBuf> = [Some(here), built_in].into_iter().flatten().collect();
    tried
        .iter()
        .find(|d| d.is_dir() && images::image_names(d).is_ok_and(|n| !n.is_empty()))
        .cloned()
        .ok_or_else(|| {
            format!(
                "no images directory: pass --images-dir DIR (the images/ of an Airlock checkout) or set AIRLOCK_IMAGES_DIR; looked in {}",
                tried
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" and ")
            )
        })
}

pub(super) async fn build_images(
    name: Option<String>,
    images_dir: &Path,
    opts: images::BuildOptions,
) -> ExitCode {
    let names = match &name {
        Some(n) => vec![n.clone()],
        None => match images::image_names(images_dir) {
            Ok(n) if !n.is_empty() => n,
            Ok(_) => {
                return fail(format!(
                    "no image directories under {}",
                    images_dir.display()
                ));
            }
            Err(e) => return fail(e),
        },
    };
    let sandbox = match DockerRuntime::connect().await {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    // One build at a time on this machine: a second waits, then finds what the first built.
    let _lock = match tokio::task::spawn_blocking(|| {
        images::BuildLock::take(|path| {
            eprintln!(
                "waiting for another airlock images build to finish (it holds {})",
                path.display()
            )
        })
    })
    .await
    .expect("taking the build lock does not panic")
    {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let mut built = Vec::new();
    for n in names {
        let mut err = std::io::stderr();
        match sandbox.build_image(images_dir, &n, opts, &mut err).await {
            Ok(b) => built.push(serde_json::json!({
                "name": b.name,
                "reference": b.reference,
                "content_tag": b.content_tag,
                "content_sha256": b.content_sha256,
                "image_id": b.image_id,
                "skipped": b.skipped,
            })),
            Err(e) => return fail(e),
        }
    }
    print_json(&built);
    ExitCode::SUCCESS
}

/// `airlock images push`: the images the configuration uses, from the machine's own engine
/// (where `airlock images build` made them) to every configured engine.
pub(super) async fn push_images(common: &Common, only: &[String]) -> ExitCode {
    let (config, _) = match load(common) {
        Ok(x) => x,
        Err(e) => return refuse(e),
    };
    if config.engines.is_empty() {
        return refuse(
            "no [[engines]] are configured: jobs run on this machine's engine, which has the images `airlock images build` made",
        );
    }
    let local = match DockerRuntime::connect().await {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let mut images: Vec<String> = config.profiles.values().map(|p| p.image.clone()).collect();
    images.push(crate::sandbox::HOLDER_IMAGE.to_string());
    images.sort();
    images.dedup();
    if let Some(unknown) = only.iter().find(|o| !images.contains(o)) {
        return refuse(format!(
            "--image {unknown:?} is not an image the configuration uses: {}",
            images.join(", ")
        ));
    }
    if !only.is_empty() {
        images.retain(|i| only.contains(i));
    }
    let kind = crate::sandbox::pool_workspace_kind(&config);
    let mut out = Vec::new();
    let mut failed = false;
    for e in &config.engines {
        let to = match DockerRuntime::connect_engine(e, kind).await {
            Ok(s) => s,
            Err(err) => {
                failed = true;
                out.push(serde_json::json!({"engine": e.name, "error": err.to_string()}));
                continue;
            }
        };
        for image in &images {
            match local.copy_image_to(&to, image).await {
                Ok(c) => out.push(serde_json::json!({"engine": e.name, "image": c})),
                Err(err) => {
                    failed = true;
                    out.push(serde_json::json!({"engine": e.name, "reference": image, "error": err.to_string()}));
                }
            }
        }
    }
    print_json(&out);
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
