//! Players outliving their agent: an agent that just started keeps the players the core lists
//! as its site's, and a client with a resumption credential (checked for signature and expiry
//! by the shell) resumes the same player; every other credential is refused, counted, and
//! changes nothing.

use super::*;

/// Player 7 of account `alice`, playing in bubble 1 here, its inputs up to 40 in a copy.
fn alice_homed() -> control::HomedPlayer {
    control::HomedPlayer {
        sample: control::PlayerSample {
            player: PlayerId(7),
            access_rtt_ms: 18.0,
            role: Role::Pilot,
            world: WorldId(0),
            pos: Vec3::default(),
            vel: Vec3::default(),
        },
        route: Some((BubbleId(1), n(SITE))),
        covered: Seq(40),
    }
}

/// A fresh agent whose core lists `homed` as its players, running bubble 1.
fn restarted(homed: Vec<control::HomedPlayer>) -> Harness {
    let mut h = Harness::new(1);
    h.effects();
    h.register_homed(homed);
    h.server_ready("mtl-gs-0");
    let (_, out) = h.order(control::Request::Create {
        bubble: BubbleId(1),
        region: region(),
        lease: lease(1, 1, 60_000),
    });
    let out = h.answer_servers(out, done);
    assert_eq!(answers(&out).len(), 1);
    h
}

fn claim(site: &str, player: u64, account: &str) -> Result<Resumption, String> {
    Ok(Resumption { site: n(site), player: PlayerId(player), account: n(account) })
}

/// A new connection of `account` sends `Resume` with `claim`: the machine's answer.
fn resume(
    h: &mut Harness,
    account: &str,
    claim: Result<Resumption, String>,
) -> (ConnId, Result<gateway::Reply, ErrorCode>) {
    h.next_conn += 1;
    let conn = h.next_conn;
    h.feed(Input::PlayerUp { conn, client: n(account) });
    let token = h.token();
    let out = h.feed(Input::PlayerResume { conn, token, claim, rtt_ms: 25.0 });
    let answer = out
        .into_iter()
        .find_map(|e| match e {
            Effect::AnswerPlayer { token: t, result } if t == token => {
                Some(result.map_err(|f| f.code))
            }
            _ => None,
        })
        .expect("answered");
    (conn, answer)
}

fn refused(h: &Harness) -> [u64; 4] {
    let s = &h.m.stats;
    [
        &s.resumes_refused_invalid,
        &s.resumes_refused_other_site,
        &s.resumes_refused_other_account,
        &s.resumes_refused_unknown,
    ]
    .map(|c| c.load(Ordering::Relaxed))
}

fn players_in_resync(effects: &[Effect]) -> Option<Vec<(u64, Option<u64>)>> {
    effects.iter().find_map(|e| match e {
        Effect::ToCore { request: control::Request::Players { players }, .. } => {
            Some(players.iter().map(|p| (p.sample.player.0, p.bubble.map(|b| b.0))).collect())
        }
        _ => None,
    })
}

#[test]
fn a_restarted_agent_keeps_its_sites_players_and_the_client_resumes_the_same_player_from_its_copy()
{
    let mut h = Harness::new(1);
    h.effects();
    let out = h.register_homed(vec![alice_homed()]);
    // Kept, and said to the core as still here (the core keeps it in its bubble).
    assert_eq!(players_in_resync(&out), Some(vec![(7, Some(1))]));
    let mut h = restarted(vec![alice_homed()]);
    // Its bubble runs on meanwhile: its server has applied up to 60, which a failover could
    // still lose (chaos seed 5118, `--overlapping`).
    h.feed(Input::ServerItem { server: n("mtl-gs-0"), item: update(1, 1, 2, &[(7, 60)]) });
    let (conn, answer) = resume(&mut h, "alice", claim(SITE, 7, "alice"));
    // The same player, from the input after those its copy holds.
    assert_eq!(
        answer,
        Ok(gateway::Reply::Joined {
            player: PlayerId(7),
            home: n(SITE),
            resume_after: Seq(41),
            resume: String::new(),
        })
    );
    assert_eq!(h.m.stats.resumes.load(Ordering::Relaxed), 1);
    // Inputs the copy holds are duplicates; the next ones are kept again (until a copy covers
    // them), acknowledged or not, and reach the bubble's server (which applies each once).
    let input = |seq| gateway::Item::Input { seq: Seq(seq), bytes: Blob(vec![1]) };
    let out = h.feed(Input::PlayerItem { conn, item: input(40) });
    assert!(inputs_to_servers(&out).is_empty(), "{out:?}");
    for seq in 41..=61 {
        let out = h.feed(Input::PlayerItem { conn, item: input(seq) });
        assert_eq!(inputs_to_servers(&out), [("mtl-gs-0".to_owned(), vec![(7, seq)])]);
    }
    let out = h.feed(Input::PlayerItem { conn, item: input(45) });
    assert!(inputs_to_servers(&out).is_empty(), "kept already: {out:?}");
    // Updates reach the new connection.
    let out =
        h.feed(Input::ServerItem { server: n("mtl-gs-0"), item: update(1, 1, 3, &[(7, 61)]) });
    assert_eq!(player_items(&out).len(), 1);
    assert_eq!(player_items(&out)[0].0, conn);
    // A restore from the copy (a newer epoch, back at 40): every kept input goes again.
    let (_, out) = h.order(control::Request::Regrant { old: lref(1), lease: lease(1, 2, 60_000) });
    let mut out = h.answer_servers(out, done);
    let restored = update(1, 2, 4, &[(7, 40)]);
    out.extend(h.feed(Input::ServerItem { server: n("mtl-gs-0"), item: restored }));
    let again: Vec<u64> =
        inputs_to_servers(&out).into_iter().flat_map(|(_, b)| b).map(|(_, s)| s).collect();
    assert_eq!(again, (41..=61).collect::<Vec<_>>());
    // A later blip of the same session resumes after the last acknowledged.
    let (_, answer) = resume(&mut h, "alice", claim(SITE, 7, "alice"));
    assert!(
        matches!(answer, Ok(gateway::Reply::Joined { resume_after: Seq(41), .. })),
        "{answer:?}"
    );
    // Resumed, it stays past the grace.
    h.advance(RESUME_GRACE + Duration::from_secs(1));
    assert!(h.m.players.contains_key(&PlayerId(7)));
}

#[test]
fn a_kept_player_whose_client_never_comes_back_leaves_after_the_grace() {
    let mut h = restarted(vec![alice_homed()]);
    h.advance(Duration::from_secs(5));
    assert!(h.m.players.contains_key(&PlayerId(7)), "kept");
    let out = h.advance(RESUME_GRACE);
    assert!(!h.m.players.contains_key(&PlayerId(7)), "left");
    let leaves: Vec<PlayerId> = out
        .iter()
        .filter_map(|e| match e {
            Effect::ToCore { request: control::Request::Report { leaves, .. }, .. } => {
                Some(leaves.clone())
            }
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(leaves, [PlayerId(7)], "the core is told");
    // Its credential no longer resumes anything.
    let (_, answer) = resume(&mut h, "alice", claim(SITE, 7, "alice"));
    assert_eq!(answer, Err(ErrorCode::Unauthorized));
    assert_eq!(refused(&h), [0, 0, 0, 1]);
}

#[test]
fn forged_expired_foreign_and_borrowed_credentials_are_refused_counted_and_change_nothing() {
    let mut h = restarted(vec![alice_homed()]);
    let before = h.m.players.get(&PlayerId(7)).map(|p| (p.conn, p.gone_since));
    // Signature or expiry wrong (the shell said why).
    let (_, a) = resume(&mut h, "alice", Err("token expired".to_owned()));
    assert_eq!(a, Err(ErrorCode::Unauthorized));
    // Another site's session.
    let (_, a) = resume(&mut h, "alice", claim("PAR", 7, "alice"));
    assert_eq!(a, Err(ErrorCode::Unauthorized));
    // Replayed from another account's connection.
    let (_, a) = resume(&mut h, "mallory", claim(SITE, 7, "alice"));
    assert_eq!(a, Err(ErrorCode::Unauthorized));
    // A player never homed here.
    let (_, a) = resume(&mut h, "alice", claim(SITE, 8, "alice"));
    assert_eq!(a, Err(ErrorCode::Unauthorized));
    assert_eq!(refused(&h), [1, 1, 1, 1]);
    assert_eq!(h.m.stats.resumes.load(Ordering::Relaxed), 0);
    let after = h.m.players.get(&PlayerId(7)).map(|p| (p.conn, p.gone_since));
    assert_eq!(before, after, "the kept player is untouched");
    // Once resumed by alice, the player is hers: a credential naming it for another account
    // (the studio's auth service minted it with the same keys) is refused.
    let (_, a) = resume(&mut h, "alice", claim(SITE, 7, "alice"));
    assert!(a.is_ok());
    let (_, a) = resume(&mut h, "bob", claim(SITE, 7, "bob"));
    assert_eq!(a, Err(ErrorCode::Unauthorized));
    assert_eq!(refused(&h), [1, 1, 2, 1]);
}

#[test]
fn before_the_core_answered_a_resume_waits_and_a_later_registration_adopts_nobody() {
    let mut h = Harness::new(1);
    h.effects();
    let (_, a) = resume(&mut h, "alice", claim(SITE, 7, "alice"));
    assert_eq!(a, Err(ErrorCode::NotReady), "try again: the core has not said who plays here");
    assert_eq!(refused(&h), [0; 4]);
    h.register_homed(Vec::new());
    // The core connection drops and comes back listing a player this agent does not know
    // (it left while the link was down): it stays gone.
    h.feed(Input::CoreDown { error: "test".to_owned() });
    h.register_homed(vec![alice_homed()]);
    assert!(!h.m.players.contains_key(&PlayerId(7)));
}

#[test]
fn a_joined_player_asks_for_a_fresh_credential_and_nobody_else_can() {
    let mut h = running(30_000);
    with_ids(&mut h);
    let (player, conn) = join_player(&mut h);
    let ask = |h: &mut Harness, conn| {
        let token = h.token();
        let request = gateway::Request::Credential;
        let out = h.feed(Input::PlayerRequest { conn, token, request, rtt_ms: 20.0 });
        out.into_iter().find_map(|e| match e {
            Effect::AnswerPlayer { result, .. } => Some(result.map_err(|f| f.code)),
            _ => None,
        })
    };
    assert_eq!(
        ask(&mut h, conn),
        Some(Ok(gateway::Reply::Credential { player, resume: String::new() })),
        "the shell signs it on the way out"
    );
    h.next_conn += 1;
    let stranger = h.next_conn;
    h.feed(Input::PlayerUp { conn: stranger, client: n("stranger") });
    assert_eq!(ask(&mut h, stranger), Some(Err(ErrorCode::Unexpected)));
}
