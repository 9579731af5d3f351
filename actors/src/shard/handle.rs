//! The handle the rest of the node holds on a shard: applies, reads and
//! board queries, each a message to the shard actor (or, for a query of
//! an active board, read from the board's view: `active_boards.rs`).

use super::*;

/// What callers outside the actor system hold: never a ractor type.
#[derive(Clone)]
pub struct ShardHandle {
    actor: ActorRef<ShardMsg>,
    pub gauges: Arc<ShardGauges>,
    boards: Arc<ActiveBoards>,
}

impl ShardHandle {
    /// Spawns the shard actor (unsupervised: the node owns its lifetime).
    pub async fn spawn(actor: ShardActor) -> Result<ShardHandle, Fatal> {
        let gauges = actor.gauges.clone();
        let boards = actor.boards.clone();
        let (a, _) = Actor::spawn(None, actor, ())
            .await
            .map_err(|e| Fatal::Actor(format!("starting the shard actor: {e}")))?;
        Ok(ShardHandle { actor: a, gauges, boards })
    }

    async fn ask<T>(
        &self,
        build: impl FnOnce(RpcReplyPort<T>) -> ShardMsg,
    ) -> Result<T, ShardError> {
        let (tx, rx) = oneshot::channel();
        self.actor.cast(build(tx.into())).map_err(|_| ShardError::Stopped)?;
        rx.await.map_err(|_| ShardError::Stopped)
    }

    /// Applies committed entries. A stopped shard is as broken as a failed
    /// apply: the entries did not apply here.
    pub async fn apply(&self, entries: Vec<ApplyEntry>) -> ApplyResult {
        match self.ask(|r| ShardMsg::Apply(entries, r)).await {
            Ok(res) => res,
            Err(e) => Err(Fatal::Actor(format!("applying: {e}"))),
        }
    }

    pub async fn user_page(
        &self,
        biz: BizId,
        user: UserId,
        after: Option<PageCursor>,
        limit: usize,
    ) -> PageResult {
        self.ask_page(|reply| ShardMsg::UserPage { biz, user, after, limit, reply }).await
    }

    pub async fn liker_page(
        &self,
        biz: BizId,
        entity: EntityId,
        after: Option<PageCursor>,
        limit: usize,
    ) -> PageResult {
        let build = |reply| ShardMsg::LikerPage { biz, entity, after, limit, reply };
        self.ask_page(build).await
    }

    /// A page the shard passes on to a user's or an entity's actor, asked
    /// once more if that actor stopped with the request in its mailbox (its
    /// entity moved away at a Release, or a snapshot replaced the shard's
    /// state; an eviction passivates by a message, after the request): the
    /// second ask is answered `Moved`, or loads the actor again, where the
    /// caller was told the shard had stopped. A shard that did stop fails
    /// the second ask too (`actors/tests/apply.rs`).
    async fn ask_page(&self, build: impl Fn(RpcReplyPort<PageResult>) -> ShardMsg) -> PageResult {
        match self.ask(&build).await {
            Err(ShardError::Stopped) => self.ask(build).await?,
            answer => answer?,
        }
    }

    /// A query on an active board, answered here from its view
    /// (`active_boards.rs`); `None` when the board is not active (the shard
    /// must load it: `board_query`).
    pub fn board_query_now(
        &self,
        rank: RankId,
        type_key: &[u8],
        query: &BoardQuery,
    ) -> Option<QueryOut> {
        let e = self.boards.get(rank, type_key)?;
        let out = crate::board_host::answer(&*crate::board_host::read_view(&e.view)?, query);
        if self.boards.due_touch(&e) {
            let _ = self.actor.cast(ShardMsg::TouchBoard { rank, type_key: type_key.to_vec() });
        }
        Some(out)
    }

    pub async fn board_query(
        &self,
        rank: RankId,
        type_key: Vec<u8>,
        rules: Rules,
        query: BoardQuery,
    ) -> Result<QueryOut, ShardError> {
        if let Some(out) = self.board_query_now(rank, &type_key, &query) {
            return Ok(out);
        }
        self.ask(|reply| ShardMsg::BoardQuery { rank, type_key, rules, query, reply }).await?
    }

    /// What applying `event` for `item` on the sub-board would give now,
    /// without applying it (see `BoardHost::check`).
    pub async fn board_check(
        &self,
        rank: RankId,
        type_key: Vec<u8>,
        rules: Rules,
        item: ItemId,
        event: ScoreEvent,
    ) -> Result<EventResult, ShardError> {
        self.ask(|reply| ShardMsg::BoardCheck { rank, type_key, rules, item, event, reply }).await?
    }

    /// Freezes the shard for an export or a digest: its trees held still,
    /// with the images of the changed boards it holds
    /// (`StateStore::freeze_with`), all at one point between applies.
    pub async fn freeze(&self) -> Result<Frozen, ShardError> {
        self.ask(ShardMsg::Freeze).await?
    }

    /// Whether `rank`'s sub-board is held, and its size if so (its stored
    /// header may be stale while it is held).
    pub fn board_size_now(&self, rank: RankId, type_key: &[u8]) -> Option<u64> {
        let e = self.boards.get(rank, type_key)?;
        let size = crate::board_host::read_view(&e.view)?.len() as u64;
        Some(size)
    }

    /// The copy of a board this shard froze for a move.
    pub async fn export_board(
        &self,
        board: plaudit_proto::placement::BoardKey,
    ) -> Result<crate::rankings::residence::BoardCopy, ShardError> {
        self.ask(|r| ShardMsg::ExportBoard(board, r)).await?
    }

    /// The copy of an entity frozen here for a move.
    pub async fn export_entity(
        &self,
        key: plaudit_proto::placement::EntityKey,
    ) -> Result<crate::likes::residence::EntityCopy, ShardError> {
        self.ask(|r| ShardMsg::ExportEntity(key, r)).await?
    }

    pub async fn reset(&self) -> Result<(), ShardError> {
        self.ask(ShardMsg::Reset).await
    }

    /// Stops the shard actor and its children and waits until they are gone,
    /// so nothing holds the store afterwards.
    pub async fn stop(&self) {
        let _ = self.actor.stop_and_wait(None, Some(Duration::from_secs(10))).await;
    }
}
