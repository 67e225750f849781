use super::*;

fn vote(id: &str, voter: &str, roles: &[&str], vote: VoteKind) -> VoteEvidence {
    VoteEvidence {
        vote_id: id.into(),
        voter: voter.into(),
        roles: roles.iter().map(|r| r.to_string()).collect(),
        vote,
    }
}

fn ev(risk: Risk, paths: &[&str]) -> Evidence {
    Evidence {
        risk,
        paths: paths.iter().map(|p| p.to_string()).collect(),
        votes: vec![],
        security: None,
        approval: None,
        tests: None,
    }
}

fn state(v: &Verdict, name: &str) -> Option<ReqState> {
    v.requirements
        .iter()
        .find(|r| r.name == name)
        .map(|r| r.state)
}

fn approval(state: ApprovalState, override_votes: bool) -> ApprovalEvidence {
    ApprovalEvidence {
        approval_id: "apr_1".into(),
        state,
        decided_by: Some("member:erin".into()),
        override_votes,
        reason_md: Some("shipping the fix".into()),
    }
}

#[test]
fn globs_match_segments_stars_and_double_stars() {
    for (g, p, want) in [
        ("migrations/**", "migrations/001.sql", true),
        ("migrations/**", "migrations/a/b.sql", true),
        ("migrations/**", "migrations", true),
        ("migrations/**", "src/migrations/x", false),
        ("**/*.sql", "a/b/c.sql", true),
        ("**/*.sql", "c.sql", true),
        ("src/*.rs", "src/a.rs", true),
        ("src/*.rs", "src/a/b.rs", false),
        ("src/?.rs", "src/é.rs", true),
        ("src/?.rs", "src/ab.rs", false),
        (".ci/**", ".ci/run", true),
        ("a/**/b", "a/b", true),
        ("a/**/b", "a/x/y/b", true),
        ("a/**/b", "a/x/y/c", false),
        ("*", "README", true),
        ("*", "a/b", false),
        ("src/db/**", "src/dbx/a", false),
    ] {
        assert_eq!(glob_matches(g, p), want, "{g} ~ {p}");
    }
    for bad in ["", "/abs", "a//b", "a**/b", "a/**b", "x\0"] {
        assert!(check_glob(bad).is_err(), "{bad:?}");
    }
    assert!(check_glob(&"a".repeat(MAX_GLOB_BYTES + 1)).is_err());
    assert!(check_glob("src/**/*.rs").is_ok());
}

#[test]
fn high_risk_comes_from_risk_or_a_path() {
    let p = Policy {
        high_risk_paths: vec!["migrations/**".into()],
        ..Policy::default()
    };
    assert!(!p.is_high_risk(Risk::Low, &["src/a".into()]));
    assert!(!p.is_high_risk(Risk::Normal, &[]));
    assert!(p.is_high_risk(Risk::High, &[]));
    assert!(p.is_high_risk(Risk::Critical, &[]));
    assert!(p.is_high_risk(Risk::Low, &["migrations/1.sql".into()]));
}

#[test]
fn routing_always_asks_a_reviewer_and_adds_path_and_security_roles() {
    let p = Policy {
        required_roles: vec![],
        path_roles: vec![PathRole {
            glob: "src/db/**".into(),
            role: "dba".into(),
        }],
        security_review: Gate::HighRisk,
        ..Policy::default()
    };
    assert_eq!(
        p.routing_roles(Risk::Normal, &["README".into()]),
        ["reviewer"]
    );
    assert_eq!(
        p.routing_roles(Risk::High, &["src/db/x.rs".into()]),
        ["reviewer", "dba", "security"]
    );
    assert_eq!(p.approving_roles(&["src/db/x.rs".into()]), ["dba"]);
}

#[test]
fn each_gate_on_and_off() {
    for gate in [Gate::Never, Gate::HighRisk, Gate::Always] {
        for risk in [Risk::Normal, Risk::High] {
            let p = Policy {
                security_review: gate,
                human_approval: gate,
                required_tests: gate == Gate::Always,
                ..Policy::default()
            };
            let mut e = ev(risk, &["a"]);
            e.votes = vec![vote("v1", "member:bob", &["reviewer"], VoteKind::Approve)];
            let v = evaluate(&p, &e);
            let on = gate.applies(risk == Risk::High);
            assert_eq!(
                state(&v, "security_review").is_some(),
                on,
                "{gate:?} {risk:?}"
            );
            assert_eq!(
                state(&v, "human_approval").is_some(),
                on,
                "{gate:?} {risk:?}"
            );
            assert_eq!(state(&v, "tests").is_some(), gate == Gate::Always);
            assert_eq!(
                v.approvable,
                !on && gate != Gate::Always,
                "{gate:?} {risk:?}: {v:?}"
            );
            // Supplying every piece of evidence makes it approvable either way.
            e.security = Some(ReviewEvidence {
                review_id: "sec_1".into(),
                reviewer: "member:sam".into(),
                verdict: SecurityVerdict::Pass,
            });
            e.approval = Some(approval(ApprovalState::Approved, false));
            e.tests = Some(TestEvidence {
                all_passed: true,
                verification_ids: vec!["ver_1".into()],
            });
            assert!(evaluate(&p, &e).approvable, "{gate:?} {risk:?}");
        }
    }
}

#[test]
fn approvals_and_roles_count_only_approving_votes_of_holders() {
    let p = Policy {
        required_approvals: 2,
        required_roles: vec!["reviewer".into(), "dba".into()],
        ..Policy::default()
    };
    let mut e = ev(Risk::Normal, &["a"]);
    e.votes = vec![
        vote("v1", "member:bob", &["reviewer"], VoteKind::Approve),
        vote("v2", "member:dan", &["dba"], VoteKind::Abstain),
    ];
    let v = evaluate(&p, &e);
    assert_eq!(state(&v, "approvals"), Some(ReqState::Missing));
    assert_eq!(state(&v, "role:reviewer"), Some(ReqState::Satisfied));
    assert_eq!(state(&v, "role:dba"), Some(ReqState::Missing));
    assert!(!v.approvable);
    e.votes[1].vote = VoteKind::ApproveWithNotes;
    let v = evaluate(&p, &e);
    assert!(v.approvable, "{v:?}");
    let r = v
        .requirements
        .iter()
        .find(|r| r.name == "approvals")
        .unwrap();
    assert_eq!(r.evidence, ["v1", "v2"]);
}

#[test]
fn reject_veto_and_revise_block_and_only_an_override_lifts_them() {
    for kind in [VoteKind::Reject, VoteKind::Veto, VoteKind::Revise] {
        let p = Policy {
            human_approval: Gate::Never,
            security_review: Gate::Never,
            ..Policy::default()
        };
        let mut e = ev(Risk::Normal, &["a"]);
        e.votes = vec![
            vote("v1", "member:bob", &["reviewer"], VoteKind::Approve),
            vote("v2", "member:eve", &[], kind),
        ];
        let v = evaluate(&p, &e);
        assert_eq!(state(&v, "no_blocking_votes"), Some(ReqState::Blocked));
        let r = v
            .requirements
            .iter()
            .find(|r| r.name == "no_blocking_votes")
            .unwrap();
        assert!(
            r.detail.contains("member:eve") && r.detail.contains(kind.as_str()),
            "{r:?}"
        );
        assert_eq!(r.evidence, ["v2"]);
        assert!(!v.approvable);
        e.approval = Some(approval(ApprovalState::Approved, true));
        let v = evaluate(&p, &e);
        assert!(v.approvable, "{v:?}");
        assert_eq!(state(&v, "no_blocking_votes"), Some(ReqState::Overridden));
        let o = v.human_override.unwrap();
        assert_eq!(o.overridden, ["no_blocking_votes"]);
        assert_eq!(o.by.as_deref(), Some("member:erin"));
        assert_eq!(o.reason_md.as_deref(), Some("shipping the fix"));
    }
}

#[test]
fn an_override_never_satisfies_security_or_tests() {
    let p = Policy {
        security_review: Gate::Always,
        required_tests: true,
        ..Policy::default()
    };
    let mut e = ev(Risk::Normal, &["a"]);
    e.approval = Some(approval(ApprovalState::Approved, true));
    let v = evaluate(&p, &e);
    assert_eq!(state(&v, "approvals"), Some(ReqState::Overridden));
    assert_eq!(state(&v, "security_review"), Some(ReqState::Missing));
    assert_eq!(state(&v, "tests"), Some(ReqState::Missing));
    assert!(!v.approvable);
    for verdict in [SecurityVerdict::Fail, SecurityVerdict::NeedsChanges] {
        e.security = Some(ReviewEvidence {
            review_id: "sec".into(),
            reviewer: "member:sam".into(),
            verdict,
        });
        assert_eq!(
            state(&evaluate(&p, &e), "security_review"),
            Some(ReqState::Blocked)
        );
    }
}

#[test]
fn an_override_needs_an_approved_approval() {
    let p = Policy::default();
    for (st, want_human) in [
        (ApprovalState::Pending, ReqState::Missing),
        (ApprovalState::Denied, ReqState::Blocked),
        (ApprovalState::Approved, ReqState::Satisfied),
    ] {
        let mut e = ev(Risk::High, &["a"]);
        e.approval = Some(approval(st, true));
        let v = evaluate(&p, &e);
        assert_eq!(state(&v, "human_approval"), Some(want_human), "{st:?}");
        assert_eq!(v.human_override.is_some(), st == ApprovalState::Approved);
    }
}

/// Every combination of two votes, a security review, a human approval (with and without
/// override) and test results, under every gate: the verdict's invariants hold.
#[test]
fn the_verdicts_invariants_hold_for_every_combination() {
    let votes: Vec<Option<VoteKind>> = std::iter::once(None)
        .chain(VoteKind::ALL.into_iter().map(Some))
        .collect();
    let securities: Vec<Option<SecurityVerdict>> = std::iter::once(None)
        .chain(SecurityVerdict::ALL.into_iter().map(Some))
        .collect();
    let approvals: Vec<Option<(ApprovalState, bool)>> = std::iter::once(None)
        .chain(
            ApprovalState::ALL
                .into_iter()
                .flat_map(|s| [(s, false), (s, true)])
                .map(Some),
        )
        .collect();
    let mut seen = 0;
    for gate in [Gate::Never, Gate::HighRisk, Gate::Always] {
        for required_tests in [false, true] {
            let p = Policy {
                required_roles: vec!["reviewer".into(), "security".into()],
                security_review: gate,
                human_approval: gate,
                required_tests,
                ..Policy::default()
            };
            for a in &votes {
                for b in &votes {
                    for s in &securities {
                        for ap in &approvals {
                            for tests in [None, Some(false), Some(true)] {
                                let mut e = ev(Risk::High, &["a"]);
                                if let Some(k) = a {
                                    e.votes.push(vote("va", "member:a", &["reviewer"], *k));
                                }
                                if let Some(k) = b {
                                    e.votes.push(vote("vb", "member:b", &["security"], *k));
                                }
                                e.security = s.map(|verdict| ReviewEvidence {
                                    review_id: "sec".into(),
                                    reviewer: "member:b".into(),
                                    verdict,
                                });
                                e.approval = ap.map(|(st, o)| approval(st, o));
                                e.tests = tests.map(|all_passed| TestEvidence {
                                    all_passed,
                                    verification_ids: vec!["ver".into()],
                                });
                                let v = evaluate(&p, &e);
                                check_invariants(&p, &e, &v);
                                seen += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    assert_eq!(seen, 3 * 2 * 7 * 7 * 4 * 7 * 3);
}

#[test]
fn no_test_run_is_missing_never_satisfied() {
    let p = Policy {
        required_tests: true,
        required_approvals: 0,
        required_roles: vec![],
        ..Policy::default()
    };
    let mut e = ev(Risk::Low, &["a"]);
    for all_passed in [true, false] {
        e.tests = Some(TestEvidence {
            all_passed,
            verification_ids: vec![],
        });
        let v = evaluate(&p, &e);
        let t = v.requirements.iter().find(|r| r.name == "tests").unwrap();
        assert_eq!(t.state, ReqState::Missing, "{v:?}");
        assert!(t.detail.contains("no test ran"), "{t:?}");
        assert!(!v.approvable);
    }
    e.tests = Some(TestEvidence {
        all_passed: true,
        verification_ids: vec!["ver_1".into()],
    });
    assert!(evaluate(&p, &e).approvable);
}

fn check_invariants(p: &Policy, e: &Evidence, v: &Verdict) {
    let all_ok = v
        .requirements
        .iter()
        .all(|r| matches!(r.state, ReqState::Satisfied | ReqState::Overridden));
    assert_eq!(v.approvable, all_ok, "{v:?}");
    let known: Vec<String> = e
        .votes
        .iter()
        .map(|x| x.vote_id.clone())
        .chain(e.security.iter().map(|s| s.review_id.clone()))
        .chain(e.approval.iter().map(|a| a.approval_id.clone()))
        .chain(e.tests.iter().flat_map(|t| t.verification_ids.clone()))
        .collect();
    for r in &v.requirements {
        assert!(!r.detail.is_empty(), "{r:?}");
        assert!(r.evidence.iter().all(|id| known.contains(id)), "{r:?}");
        if r.state == ReqState::Overridden {
            assert!(
                r.name == "approvals"
                    || r.name.starts_with("role:")
                    || r.name == "no_blocking_votes",
                "only vote requirements can be overridden: {r:?}"
            );
            assert!(v.human_override.is_some());
        }
    }
    // A blocking vote is always visible: blocked, or overridden by a named human.
    if e.votes.iter().any(|x| x.vote.blocks()) {
        assert!(matches!(
            state(v, "no_blocking_votes"),
            Some(ReqState::Blocked | ReqState::Overridden)
        ));
    }
    if let Some(o) = &v.human_override {
        assert!(o.by.is_some() && o.reason_md.is_some());
        assert!(
            e.approval
                .as_ref()
                .is_some_and(|a| a.state == ApprovalState::Approved && a.override_votes)
        );
    }
    let security_on = p.security_review.applies(v.high_risk);
    assert_eq!(state(v, "security_review").is_some(), security_on);
    if security_on && e.security.as_ref().map(|s| s.verdict) != Some(SecurityVerdict::Pass) {
        assert!(!v.approvable, "security can never be overridden: {v:?}");
    }
}

#[test]
fn approvals_are_decided_once() {
    assert_eq!(
        ApprovalState::Pending.on(ApprovalEvent::Approve),
        Ok(ApprovalState::Approved)
    );
    assert_eq!(
        ApprovalState::Pending.on(ApprovalEvent::Deny),
        Ok(ApprovalState::Denied)
    );
    for s in [ApprovalState::Approved, ApprovalState::Denied] {
        for e in [ApprovalEvent::Approve, ApprovalEvent::Deny] {
            assert!(s.on(e).is_err());
        }
    }
}
