//! The idempotency-scope owner role: creates with an `Idempotency-Key` are decided by the core
//! that owns their scope (`<api key id>:<Idempotency-Key>`, placed like a key), which holds the
//! scope's records ([`IdemTable`]) and its flights (creates in progress), so a retry on any
//! core joins the flight or replays its result.

use crate::api::idempotency::{
    scope_string, Begin, IdemScope, IdemTable, Outcome as IdemOutcome, RequestHash, WaiterToken,
};
use crate::api::request::CreateRequest;
use crate::api_front::creates::{Creates, IdemTag};
use crate::base::key::InlineKey;
use crate::mesh::router::Router;
use crate::mesh::{ApiMsg, LinkInfo, Mesh, ReadReq, ReplyTo, WriteOutcome};
use std::collections::HashMap;

/// An idempotent create in progress on its scope's owner.
struct Flight {
    scope: IdemScope,
    hash: RequestHash,
    origin: ReplyTo,
    req: Box<CreateRequest>,
    created_at_s: u64,
}

/// One core's idempotency scopes.
pub struct Flights {
    me: usize,
    router: Router,
    /// Records and in-flight scopes (filled from the logs at start).
    pub table: IdemTable,
    waiters: HashMap<u64, ReplyTo>,
    flights: HashMap<u32, Flight>,
    next_flight: u32,
    next_token: u64,
}

impl Flights {
    pub fn new(me: usize, router: Router, table: IdemTable) -> Flights {
        Flights {
            me,
            router,
            table,
            waiters: HashMap::new(),
            flights: HashMap::new(),
            next_flight: 0,
            next_token: 0,
        }
    }

    fn flight_reply(&self, flight: u32) -> ReplyTo {
        ReplyTo::Flight {
            core: self.me as u16,
            flight,
        }
    }

    fn tag(f: &Flight) -> IdemTag {
        Box::new((scope_string(&f.scope), f.hash.0))
    }

    /// A create under `scope` arrived (from any core).
    #[allow(clippy::too_many_arguments)]
    pub fn on_idem_create(
        &mut self,
        reply: ReplyTo,
        scope: IdemScope,
        hash: RequestHash,
        req: Box<CreateRequest>,
        created_at_s: u64,
        now_s: u64,
        creates: &mut Creates,
        mesh: &mut Mesh,
    ) {
        let token = self.next_token;
        self.next_token += 1;
        let answer = |mesh: &mut Mesh, outcome| {
            mesh.deliver(reply.core(), ApiMsg::WriteDone { reply, outcome })
        };
        match self
            .table
            .begin(scope.clone(), hash, now_s, WaiterToken(token))
        {
            Begin::Proceed => {
                let flight = self.next_flight;
                self.next_flight = self.next_flight.wrapping_add(1);
                let f = Flight {
                    scope,
                    hash,
                    origin: reply,
                    req: req.clone(),
                    created_at_s,
                };
                let tag = Self::tag(&f);
                self.flights.insert(flight, f);
                let fr = self.flight_reply(flight);
                creates.start(fr, req, created_at_s, 0, Some(tag), mesh);
            }
            Begin::Wait => {
                self.waiters.insert(token, reply);
            }
            // The original response, rebuilt from the link as it is now, if it is still the
            // link that request created (not one made under the same alias since a DELETE).
            Begin::Replay(key, created_at_s, created_tag) => match InlineKey::new(key.as_bytes()) {
                Some(k)
                    if creates.replay_through_fleet(
                        reply,
                        k,
                        &req,
                        created_at_s,
                        Box::new((scope_string(&scope), hash.0)),
                        mesh,
                    ) => {}
                Some(k) => {
                    let owner = self.router.owner(k.as_bytes()).core;
                    let req = ReadReq::Replay {
                        key: k,
                        created_at_s,
                        created_tag,
                    };
                    mesh.deliver(owner, ApiMsg::Read { reply, req });
                }
                None => answer(mesh, WriteOutcome::NotFound),
            },
            Begin::Mismatch => answer(mesh, WriteOutcome::IdemMismatch),
            Begin::Busy => answer(mesh, WriteOutcome::Busy),
        }
    }

    /// A key's owner answered a flight's create.
    pub fn on_flight_done(
        &mut self,
        flight: u32,
        outcome: WriteOutcome,
        now_s: u64,
        creates: &mut Creates,
        mesh: &mut Mesh,
    ) {
        let Some(f) = self.flights.get(&flight) else {
            return;
        };
        match outcome {
            // The link and its idempotency record were made durable together (`PutWithIdem`).
            WriteOutcome::Created(info) => self.finish(flight, Ok(*info), now_s, mesh),
            WriteOutcome::Exists if f.req.custom_alias.is_none() => {
                let (req, created, tag) = (f.req.clone(), f.created_at_s, Self::tag(f));
                let fr = self.flight_reply(flight);
                creates.start(fr, req, created, 1, Some(tag), mesh);
            }
            other => self.finish(flight, Err(other), now_s, mesh),
        }
    }

    fn finish(
        &mut self,
        flight: u32,
        result: Result<LinkInfo, WriteOutcome>,
        now_s: u64,
        mesh: &mut Mesh,
    ) {
        let Some(f) = self.flights.remove(&flight) else {
            return;
        };
        let outcome = match &result {
            Ok(info) => IdemOutcome::Created(info.key.as_str().to_string(), info.created_tag),
            Err(_) => IdemOutcome::Failed,
        };
        // The record is stamped with the link's creation time, as recovery stamps it from the
        // log, so a replay can tell this link from a later one under the same key.
        let at = result.as_ref().map_or(now_s, |info| info.created_at_s);
        let tokens = self.table.finish(&f.scope, outcome, at);
        let mut replies = vec![f.origin];
        replies.extend(tokens.iter().filter_map(|t| self.waiters.remove(&t.0)));
        for reply in replies {
            let outcome = match &result {
                Ok(info) => WriteOutcome::Created(Box::new(info.clone())),
                Err(o) => clone_failure(o),
            };
            mesh.deliver(reply.core(), ApiMsg::WriteDone { reply, outcome });
        }
    }
}

fn clone_failure(o: &WriteOutcome) -> WriteOutcome {
    match o {
        WriteOutcome::Exists => WriteOutcome::Exists,
        WriteOutcome::NotFound => WriteOutcome::NotFound,
        WriteOutcome::WriteInProgress => WriteOutcome::WriteInProgress,
        WriteOutcome::IdemMismatch => WriteOutcome::IdemMismatch,
        WriteOutcome::Busy => WriteOutcome::Busy,
        WriteOutcome::DatabaseUnavailable => WriteOutcome::DatabaseUnavailable,
        WriteOutcome::DatabaseRefused(r) => WriteOutcome::DatabaseRefused(*r),
        _ => WriteOutcome::StorageFailed,
    }
}
