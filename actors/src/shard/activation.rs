//! Activation of the virtual actors a shard hosts: a user's or an
//! entity's actor, or a board, started on first use from the shard's
//! store, and let go again (boards written back) when over budget.

use super::*;

impl ShardActor {
    pub(super) fn list_memory(&self, biz: BizId, user_side: bool) -> usize {
        self.directory
            .get(biz)
            .map(|b| if user_side { b.config.user_list_memory } else { b.config.liker_list_memory })
            .unwrap_or(100) as usize
    }

    pub(super) async fn user(
        &self,
        myself: &ActorRef<ShardMsg>,
        state: &mut ShardState,
        biz: BizId,
        user: UserId,
    ) -> Result<ActorRef<UserMsg>, Fatal> {
        let now = Instant::now();
        if let Some(a) = state.users.touch(&(biz, user), now) {
            return Ok(a);
        }
        let args =
            UserArgs { biz, user, shard: self.cfg.shard, list_memory: self.list_memory(biz, true) };
        let actor = UserActor { store: self.store.clone() };
        let (a, _) = Actor::spawn_linked(None, actor, args, myself.get_cell())
            .await
            .map_err(|e| Fatal::Actor(format!("activating user {user}: {e}")))?;
        state.users.insert((biz, user), a.clone(), now);
        Ok(a)
    }

    pub(super) async fn entity(
        &self,
        myself: &ActorRef<ShardMsg>,
        state: &mut ShardState,
        biz: BizId,
        entity: EntityId,
    ) -> Result<ActorRef<EntityMsg>, Fatal> {
        let now = Instant::now();
        if let Some(a) = state.entities.touch(&(biz, entity), now) {
            return Ok(a);
        }
        let args = EntityArgs {
            biz,
            entity,
            shard: self.cfg.shard,
            list_memory: self.list_memory(biz, false),
        };
        let actor = EntityActor { store: self.store.clone() };
        let (a, _) = Actor::spawn_linked(None, actor, args, myself.get_cell())
            .await
            .map_err(|e| Fatal::Actor(format!("activating entity {entity}: {e}")))?;
        state.entities.insert((biz, entity), a.clone(), now);
        Ok(a)
    }

    /// A sub-board, loaded from storage with `rules` if it is not held.
    pub(super) fn board<'s>(
        &self,
        state: &'s mut ShardState,
        rank: RankId,
        type_key: Vec<u8>,
        rules: Rules,
    ) -> Result<&'s mut BoardHost, Fatal> {
        let now = Instant::now();
        let key = (rank, type_key);
        if !state.boards.contains(&key) {
            state.board_serial += 1;
            let args = BoardArgs { rank, type_key: key.1.clone(), shard: self.cfg.shard, rules };
            let mut host = BoardHost::load(&self.store, args, state.board_serial)?;
            self.gauges.boards_loaded.fetch_add(1, Ordering::Relaxed);
            host.report(&self.gauges, false);
            self.boards.insert(rank, key.1.clone(), host.view());
            state.boards.insert(key.clone(), host, now);
        }
        state
            .boards
            .touch_mut(&key, now)
            .ok_or_else(|| Fatal::Actor(format!("a board of ranking {rank} vanished on load")))
    }

    /// Lets boards go: unlisted for readers, their share of the gauges
    /// returned, and the changed ones written back (staged before anything
    /// can load them again: loads run on this actor).
    pub(super) fn unload_boards(&self, hosts: Vec<BoardHost>) -> Result<(), Fatal> {
        let mut ws = plaudit_storage::WriteSet::new(self.cfg.shard);
        let mut res = Ok(());
        for mut host in hosts {
            if host.changed() && res.is_ok() {
                res = self.write_back(&mut ws, &mut host);
                if res.is_ok() {
                    self.gauges.boards_written_back.fetch_add(1, Ordering::Relaxed);
                }
            }
            self.discard_boards(vec![host]);
        }
        self.store.stage(ws);
        res
    }

    /// Lets boards go without writing anything back: their state was
    /// replaced (a snapshot), deleted (a drop) or is not to be trusted.
    pub(super) fn discard_boards(&self, hosts: Vec<BoardHost>) {
        for mut host in hosts {
            self.boards.remove(host.rank, &host.type_key);
            host.report(&self.gauges, true);
        }
    }
}
