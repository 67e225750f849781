//! Configuration parsing, defaults and bounds.

use super::*;

#[test]
fn builtin_default_profile_has_documented_values() {
    let c = Config::builtin();
    let p = c.profile("default").unwrap();
    assert_eq!(p.image, DEFAULT_IMAGE);
    assert_eq!((p.uid, p.gid), (65532, 65532));
    assert_eq!(p.working_dir, "/workspace");
    assert_eq!(p.memory_bytes, 1073741824);
    assert_eq!(p.cpus, 1.0);
    assert_eq!(p.pids, 256);
    assert_eq!(p.tmp_bytes, 268435456);
    assert_eq!(p.env.get("LANG").map(String::as_str), Some("C.UTF-8"));
    assert_eq!(p.setup_script, "");
    assert_eq!(p.disk_bytes, 4 << 30);
    assert_eq!(p.inodes, 1_000_000);
    assert_eq!(c.data_dir, default_data_dir());
    assert!(c.data_dir.ends_with("airlock"));
    assert_eq!(c.checkout_filesystem, CheckoutFilesystem::Loop);
    assert_eq!(c.min_free_bytes, 2 << 30);
    assert_eq!(c.max_connections, 512);
    assert_eq!(c.run_retention, std::time::Duration::from_secs(30 * 86_400));
}

#[test]
fn the_default_data_dir_is_the_state_home_never_the_current_directory() {
    let os = |s: &str| Some(std::ffi::OsString::from(s));
    assert_eq!(
        data_dir_from(os("/s"), os("/h")),
        PathBuf::from("/s/airlock")
    );
    // A relative XDG_STATE_HOME is invalid by the spec: ignored.
    assert_eq!(
        data_dir_from(os("rel"), os("/h")),
        PathBuf::from("/h/.local/state/airlock")
    );
    assert_eq!(
        data_dir_from(None, os("/h")),
        PathBuf::from("/h/.local/state/airlock")
    );
    assert_eq!(data_dir_from(None, None), PathBuf::from(".airlock"));
}

#[test]
fn builtin_toolchain_profile() {
    let c = Config::builtin();
    let p = c.profile("toolchain").unwrap();
    assert_eq!(p.image, TOOLCHAIN_IMAGE);
    assert_eq!(p.memory_bytes, 2 << 30);
    assert_eq!(p.cpus, 2.0);
    assert_eq!(p.pids, 1024);
    assert_eq!(p.env["HOME"], "/tmp");
    assert_eq!(p.env["CARGO_HOME"], "/tmp/cargo-home");
}

#[test]
fn builtin_git_profile_is_small() {
    let c = Config::builtin();
    let p = c.profile(GIT_PROFILE).unwrap();
    assert_eq!(p.image, GIT_IMAGE);
    assert_eq!(p.memory_bytes, 512 << 20);
    assert_eq!(p.pids, 128);
    assert_eq!(p.env["HOME"], "/tmp");
}

#[test]
fn file_profiles_override_and_extend() {
    let c = Config::parse(
        "data_dir = \"/var/lib/airlock\"\n[profiles.big]\nimage = \"x:1\"\nmemory_bytes = 2147483648\ncpus = 2.5\n",
    )
    .unwrap();
    assert_eq!(c.data_dir, PathBuf::from("/var/lib/airlock"));
    assert_eq!(c.profile("big").unwrap().memory_bytes, 2147483648);
    assert_eq!(c.profile("big").unwrap().pids, 256);
    assert!(c.profile("default").is_ok());
}

#[test]
fn unknown_keys_are_named() {
    let e = Config::parse("data_dirr = \"x\"").unwrap_err().to_string();
    assert!(e.contains("data_dirr"), "{e}");
    let e = Config::parse("[profiles.a]\nimage = \"x\"\nprivileged = true\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("privileged"), "{e}");
}

#[test]
fn image_is_required() {
    let e = Config::parse("[profiles.a]\ncpus = 1.0\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("image"), "{e}");
}

#[test]
fn bad_values_name_field_and_bound() {
    let cases = [
        ("memory_bytes = 1", "profiles.a.memory_bytes"),
        ("cpus = 0.0", "profiles.a.cpus"),
        ("pids = 0", "profiles.a.pids"),
        ("tmp_bytes = 5", "profiles.a.tmp_bytes"),
        ("user = \"0:0\"", "profiles.a.user"),
        ("user = \"root\"", "profiles.a.user"),
        ("working_dir = \"rel\"", "profiles.a.working_dir"),
        ("working_dir = \"/tmp/x\"", "profiles.a.working_dir"),
        ("env = { \"A=B\" = \"c\" }", "profiles.a.env"),
        ("disk_bytes = 1024", "profiles.a.disk_bytes"),
        ("disk_bytes = 1099511627777", "profiles.a.disk_bytes"),
        ("inodes = 10", "profiles.a.inodes"),
        ("disk_bytes = 16777216\ninodes = 5000", "profiles.a.inodes"),
    ];
    for (line, field) in cases {
        let e = Config::parse(&format!("[profiles.a]\nimage = \"x\"\n{line}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(field), "{line}: {e}");
    }
}

#[test]
fn workspaces_and_tokens() {
    let c = Config::parse(&format!(
        "listen = \"127.0.0.1:1\"\n[workspaces.ws_1]\nrepo = \"/r\"\nmembers = {{ alice = [\"view\", \"push\"] }}\n\
         [[tokens]]\nsha256 = \"{}\"\nmember_id = \"alice\"\n\
         [[tokens]]\nsha256 = \"{}\"\nrun_id = \"run_1\"\nworkspace_id = \"ws_1\"\n",
        "a".repeat(64),
        "b".repeat(64)
    ))
    .unwrap();
    assert_eq!(c.listen, "127.0.0.1:1");
    let ws = &c.workspaces["ws_1"];
    assert_eq!(ws.profile, "default");
    assert!(ws.distinct_approver, "separation of duties is the default");
    assert_eq!(
        ws.members["alice"],
        vec![Permission::View, Permission::Push]
    );
    assert_eq!(c.tokens.len(), 2);
    assert_eq!(
        c.tokens[1].subject,
        TokenSubject::Run {
            run_id: "run_1".into(),
            workspace_id: "ws_1".into()
        }
    );
    let bad = [
        (
            "[[tokens]]\nsha256 = \"zz\"\nmember_id = \"a\"\n",
            "tokens[0].sha256",
        ),
        (
            "[[tokens]]\nsha256 = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\nmember_id = \"a\"\nrun_id = \"r\"\n",
            "tokens[0]",
        ),
        (
            "[workspaces.w]\nrepo = \"/r\"\nmembers = { a = [\"root\"] }\n",
            "root",
        ),
        (
            "[workspaces.w]\nrepo = \"/r\"\nprofile = \"nope\"\n",
            "workspaces.w.profile",
        ),
        ("evidence_ttl_days = 0\n", "evidence_ttl_days"),
        ("max_connections = 0\n", "max_connections"),
        ("run_retention_days = 0\n", "run_retention_days"),
        (
            "header_read_timeout_seconds = 0\n",
            "header_read_timeout_seconds",
        ),
        (
            "body_read_timeout_seconds = 3601\n",
            "body_read_timeout_seconds",
        ),
        ("keep_alive_idle_seconds = 0\n", "keep_alive_idle_seconds"),
        ("claim_retention_days = 0\n", "claim_retention_days"),
        ("max_patch_bytes = 100\n", "max_patch_bytes"),
        ("max_patch_bytes = 999999999\n", "max_patch_bytes"),
        (
            "expected_test_timeout_seconds = 0\n",
            "expected_test_timeout_seconds",
        ),
        (
            "expected_test_timeout_seconds = 1801\n",
            "expected_test_timeout_seconds",
        ),
        ("checkout_filesystem = \"tmpfs\"\n", "checkout_filesystem"),
        (
            "[[tokens]]\nsha256 = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\nmember_id = \"a\"\n\
             [[tokens]]\nsha256 = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\nmember_id = \"b\"\n",
            "tokens[1].sha256",
        ),
    ];
    for (text, needle) in bad {
        let e = Config::parse(text).unwrap_err().to_string();
        assert!(e.contains(needle), "{text}: {e}");
    }
}

#[test]
fn unknown_profile_lists_known_ones() {
    let e = Config::builtin().profile("nope").unwrap_err().to_string();
    assert!(e.contains("nope") && e.contains("default"), "{e}");
}

#[test]
fn governed_workspaces_name_their_worktree_and_the_new_permissions_parse() {
    let c = Config::parse(
        "[workspaces.g]\nworktree = \"/srv/checkout\"\n\
         members = { carol = [\"propose\", \"review\", \"approve\", \"apply\", \"admin\"] }\n\
         [workspaces.plain]\nrepo = \"/r\"\n",
    )
    .unwrap();
    let g = &c.workspaces["g"];
    assert_eq!(
        g.worktree.as_deref(),
        Some(std::path::Path::new("/srv/checkout"))
    );
    assert_eq!(
        g.repo,
        std::path::PathBuf::from("/srv/checkout"),
        "its own .git is the repository"
    );
    assert_eq!(
        g.members["carol"],
        vec![
            Permission::Propose,
            Permission::Review,
            Permission::Approve,
            Permission::Apply,
            Permission::Admin
        ]
    );
    assert_eq!(c.workspaces["plain"].worktree, None);
    for (text, field) in [
        (
            "[workspaces.g]\nworktree = \"relative/dir\"\n",
            "workspaces.g.worktree",
        ),
        (
            "[workspaces.g]\nworktree = \"/a\"\nrepo = \"/b\"\n",
            "workspaces.g.repo",
        ),
        ("[workspaces.g]\nmembers = {}\n", "workspaces.g.repo"),
    ] {
        let e = Config::parse(text).unwrap_err().to_string();
        assert!(e.contains(field), "{text}: {e}");
    }
    Config::parse("[workspaces.g]\nworktree = \"/a\"\nrepo = \"/a\"\n").unwrap();
}

#[test]
fn roles_and_policy_parse_with_defaults_and_bounds() {
    let c = Config::parse(
        "[workspaces.g]\nworktree = \"/srv/checkout\"\n\
         members = { carol = [\"review\"] }\n\
         [workspaces.g.roles]\ncarol = [\"reviewer\", \"security\"]\n\"run:r1\" = [\"dba\"]\n\
         [workspaces.g.policy]\nrequired_approvals = 2\nhigh_risk_paths = [\"migrations/**\"]\n\
         path_roles = [{ glob = \"src/db/**\", role = \"dba\" }]\nsecurity_review = \"always\"\n\
         human_approval = \"never\"\nrequired_tests = true\n\
         [workspaces.plain]\nrepo = \"/r\"\n",
    )
    .unwrap();
    let g = &c.workspaces["g"];
    assert_eq!(g.roles["carol"], ["reviewer", "security"]);
    assert_eq!(g.roles["run:r1"], ["dba"]);
    let p = &g.policy;
    assert_eq!(p.required_approvals, 2);
    assert_eq!(p.required_roles, ["reviewer"], "the default stays");
    assert_eq!(p.path_roles[0].role, "dba");
    assert_eq!(p.security_review, crate::domain::policy::Gate::Always);
    assert_eq!(p.human_approval, crate::domain::policy::Gate::Never);
    assert!(p.required_tests);
    assert_eq!(
        c.workspaces["plain"].policy,
        crate::domain::policy::Policy::default()
    );
    let ws = "[workspaces.g]\nworktree = \"/srv/checkout\"\n";
    for (extra, needle) in [
        (
            "[workspaces.g.roles]\ncarol = [\"Reviewer\"]\n",
            "workspaces.g.roles.carol",
        ),
        (
            "[workspaces.g.roles]\n\"run:\" = [\"x\"]\n",
            "workspaces.g.roles.run:",
        ),
        (
            "[workspaces.g.roles]\n\"a b\" = [\"x\"]\n",
            "workspaces.g.roles.a b",
        ),
        (
            "[workspaces.g.policy]\nrequired_approvals = 33\n",
            "required_approvals",
        ),
        (
            "[workspaces.g.policy]\nrequired_roles = [\"\"]\n",
            "required_roles",
        ),
        (
            "[workspaces.g.policy]\nhigh_risk_paths = [\"/abs\"]\n",
            "high_risk_paths[0]",
        ),
        (
            "[workspaces.g.policy]\nhigh_risk_paths = [\"a**\"]\n",
            "high_risk_paths[0]",
        ),
        (
            "[workspaces.g.policy]\npath_roles = [{ glob = \"a\", role = \"A\" }]\n",
            "path_roles[0].role",
        ),
        (
            "[workspaces.g.policy]\nsecurity_review = \"sometimes\"\n",
            "security_review",
        ),
        ("[workspaces.g.policy]\nquorum = 3\n", "quorum"),
    ] {
        let text = format!("{ws}{extra}");
        let e = Config::parse(&text).unwrap_err().to_string();
        assert!(e.contains(needle), "{text}: {e}");
    }
}

#[test]
fn public_url_is_an_http_or_https_url_of_bounded_length() {
    let ok = Config::parse("public_url = \"https://airlock.example:8443/\"\n").unwrap();
    assert_eq!(
        ok.public_url.as_deref(),
        Some("https://airlock.example:8443/")
    );
    assert_eq!(Config::parse("").unwrap().public_url, None);
    let long = format!(
        "https://{}",
        "a".repeat(crate::limits::MAX_PUBLIC_URL_BYTES)
    );
    for bad in [
        "ftp://x",
        "https://",
        "airlock.example",
        "https://a b",
        long.as_str(),
    ] {
        let e = Config::parse(&format!("public_url = \"{bad}\"\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("public_url"), "{bad}: {e}");
    }
}

#[test]
fn isolation_levels_default_to_runc_follow_the_top_level_and_name_a_bad_field() {
    use crate::domain::isolation::Isolation;
    let c = Config::builtin();
    assert!(c.profiles.values().all(|p| p.runtime == Isolation::Runc));
    let c = Config::parse(
        "runtime = \"runsc\"\n[profiles.plain]\nimage = \"i\"\n\
         [profiles.fast]\nimage = \"i\"\nruntime = \"runc\"\n",
    )
    .unwrap();
    assert_eq!(c.profile("plain").unwrap().runtime, Isolation::Runsc);
    assert_eq!(c.profile("default").unwrap().runtime, Isolation::Runsc);
    assert_eq!(c.profile("fast").unwrap().runtime, Isolation::Runc);
    for (text, field) in [
        (
            "[profiles.p]\nimage = \"i\"\nruntime = \"kata\"\n",
            "profiles.p.runtime",
        ),
        ("runtime = \"runC\"\n", "runtime"),
    ] {
        let e = Config::parse(text).unwrap_err().to_string();
        assert!(e.contains(field), "{e}");
        assert!(e.contains("\"runc\" or \"runsc\""), "{e}");
    }
}

#[test]
fn webhooks_are_checked_field_by_field_and_named_by_a_stable_id() {
    let base = "[workspaces.w]\nrepo = \"/r\"\n";
    let with = |hook: &str| format!("{base}[[workspaces.w.webhooks]]\n{hook}");
    let good = "url = \"https://ci.example/hooks/airlock\"\nevents = [\"job.settled\", \"job.queued\", \"job.settled\"]\nsecret = \"0123456789abcdef\"\n";
    let c = Config::parse(&with(good)).unwrap();
    let h = &c.workspaces["w"].webhooks[0];
    assert_eq!(h.events, vec!["job.queued", "job.settled"]);
    assert_eq!((h.max_attempts, h.timeout.as_secs()), (8, 10));
    assert!(h.id.starts_with("wh_") && h.id.len() == 19, "{}", h.id);
    assert!(
        !format!("{h:?}").contains("0123456789abcdef"),
        "the secret is never printed"
    );
    // The same subscription has the same id on every start.
    assert_eq!(
        Config::parse(&with(good)).unwrap().workspaces["w"].webhooks[0].id,
        h.id
    );
    for (hook, field, says) in [
        (
            "url = \"ftp://x\"\nevents = [\"job.settled\"]\nsecret = \"0123456789abcdef\"",
            "webhooks[0].url",
            "http://",
        ),
        (
            "url = \"http://x\"\nevents = []\nsecret = \"0123456789abcdef\"",
            "webhooks[0].events",
            "names no event kind",
        ),
        (
            "url = \"http://x\"\nevents = [\"job.done\"]\nsecret = \"0123456789abcdef\"",
            "webhooks[0].events",
            "\"job.done\" is not an event kind",
        ),
        (
            "url = \"http://x\"\nevents = [\"job.settled\"]\nsecret = \"short\"",
            "webhooks[0].secret",
            "16..=1024",
        ),
        (
            "url = \"http://x\"\nevents = [\"job.settled\"]",
            "webhooks[0].secret",
            "every delivery is signed",
        ),
        (
            "url = \"http://x\"\nevents = [\"job.settled\"]\nsecret = \"0123456789abcdef\"\nsecret_file = \"/s\"",
            "webhooks[0].secret",
            "not both",
        ),
        (
            "url = \"http://x\"\nevents = [\"job.settled\"]\nsecret = \"0123456789abcdef\"\nmax_attempts = 0",
            "webhooks[0].max_attempts",
            "between 1 and 50",
        ),
        (
            "url = \"http://x\"\nevents = [\"job.settled\"]\nsecret = \"0123456789abcdef\"\ntimeout_seconds = 500",
            "webhooks[0].timeout_seconds",
            "between 1 and 120",
        ),
        (
            "url = \"http://x\"\nevents = [\"job.settled\"]\nsecret_file = \"/nonexistent/secret\"",
            "webhooks[0].secret_file",
            "/nonexistent/secret",
        ),
    ] {
        let e = Config::parse(&with(hook)).unwrap_err().to_string();
        assert!(e.contains(&format!("workspaces.w.{field}")), "{hook}: {e}");
        assert!(e.contains(says), "{hook}: {e}");
    }
    let twice = format!("{}[[workspaces.w.webhooks]]\n{good}", with(good));
    let e = Config::parse(&twice).unwrap_err().to_string();
    assert!(e.contains("repeats webhook"), "{e}");
    // A secret from a file, trailing newline dropped.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("s");
    std::fs::write(&f, "from-a-file-0123456789\n").unwrap();
    let c = Config::parse(&with(&format!(
        "url = \"http://x\"\nevents = [\"job.settled\"]\nsecret_file = \"{}\"\n",
        f.display()
    )))
    .unwrap();
    assert_eq!(
        c.workspaces["w"].webhooks[0].secret.bytes(),
        b"from-a-file-0123456789"
    );
}
