"""flashcpu.distributed.ring_attention: libflashcpu_mpi's ring over a
torch.distributed group. A prompt of 2N blocks over N ranks in zigzag order
(rank r holds blocks r and 2N-1-r, so that under the causal mask every rank
has the same work); each of N steps computes the rank's two query blocks
against the two K/V blocks it holds while those travel on to the next rank
(isend / irecv), and merges each pair's state into its query block's running
state, in the order the MPI ring uses."""

from . import _api, _arrays, errors


def as_torch(torch, x):
    """A torch view of an array or tensor (no copy): numpy bfloat16 (a
    flashcpu.bf16 or ml_dtypes array) as torch.bfloat16."""
    if isinstance(x, _arrays.bf16):
        return torch.from_numpy(x.array).view(torch.bfloat16)
    if _arrays.kind_of(x) == "torch":
        return x.detach()
    array = _arrays.raw(x)
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view("uint16")).view(torch.bfloat16)
    return torch.from_numpy(array)


def _bytes(torch, tensors):
    return torch.cat([t.reshape(-1).view(torch.uint8) for t in tensors])


def _unpack(torch, buffer, like):
    """The tensors of like's shapes and dtypes in buffer's bytes."""
    out, at = [], 0
    for t in like:
        size = t.numel() * t.element_size()
        out.append(buffer[at:at + size].view(t.dtype).view(t.shape))
        at += size
    return out


class Ring:
    def __init__(self, group, q, k, v, options, context):
        self.g, self.q, self.options, self.context = group, q, options, context
        torch = group.torch
        self.torch = torch
        self.q = as_torch(torch, q)
        self.k, self.v = (as_torch(torch, x).contiguous() for x in (k, v))
        self.batch, rows, self.heads = (_arrays.view(q, "bshd", "q").dims[i] for i in range(3))
        self.block = rows // 2
        self.dv = self.v.shape[3]
        shape = (self.batch, self.block, self.heads, self.dv)
        self.running = [None, None]
        if options["sinks"] is not None:
            sinks = options["sinks"]
            if _arrays.kind_of_or_none(sinks) != "torch":
                sinks = torch.from_numpy(_arrays.raw(sinks))
            lse = sinks.to(torch.float32).reshape(1, self.heads, 1)
            lse = lse.expand(self.batch, self.heads, self.block).contiguous()
            self.running = [(torch.zeros(shape), lse.clone()) for _ in range(2)]
        self.pair = torch.empty(shape, dtype=torch.float32)
        self.spares = []  # state buffers free for the next merge

    def _attend(self, mine, query_block, held, which, key_block):
        """Query block `mine` against key block `which` of held (block
        key_block of the prompt), merged into the block's running state.
        Three buffers per call (the pair's, a spare, and the running
        states'), swapped as the C ring swaps them: no allocation a pair."""
        bs = self.block
        q = self.q[:, mine * bs:(mine + 1) * bs]
        k, v = (x[:, which * bs:(which + 1) * bs] for x in held)
        o = self.options
        pair = self.pair
        _, lse = _api.attention(q, k, v, causal=o["causal"], window=o["window"],
                                softcap=o["softcap"], scale=o["scale"],
                                alibi_slopes=o["alibi_slopes"],
                                query_offsets=[(query_block - key_block) * bs] * self.batch,
                                out=pair, return_lse=True, context=self.context)
        if self.running[mine] is None:
            self.running[mine] = (pair, lse)
            self.pair = self.spares.pop() if self.spares else self.torch.empty_like(pair)
            return
        state, state_lse = self.running[mine]
        merged = self.spares.pop() if self.spares else self.torch.empty_like(pair)
        _, merged_lse = _api.merge_states([state, pair], [state_lse, lse], out=merged,
                                          return_lse=True, context=self.context)
        self.running[mine] = (merged, merged_lse)
        self.spares.append(state)

    def run(self):
        """The N steps; returns the first error this rank met (or None). A
        rank whose computation failed keeps passing blocks, so that no rank
        waits."""
        g, torch = self.g, self.torch
        n, r = g.size, g.rank
        mine = (r, 2 * n - 1 - r)
        held = (self.k, self.v)
        travelling = _bytes(torch, held)
        error = None
        for step in range(n):
            source = (r - step) % n
            held_blocks = (source, 2 * n - 1 - source)
            requests, arriving = [], None
            if step < n - 1:
                arriving = torch.empty_like(travelling)
                requests = [g.dist.irecv(arriving, src=g._global((r - 1) % n), group=g.group),
                            g.dist.isend(travelling, dst=g._global((r + 1) % n),
                                         group=g.group)]
            for m in range(2):
                for w in range(2):
                    if error is not None or (self.options["causal"] and
                                             held_blocks[w] > mine[m]):
                        continue
                    try:
                        self._attend(m, mine[m], held, w, held_blocks[w])
                    except Exception as failure:  # passed to every rank by agree
                        error = failure
            for request in requests:
                request.wait()
            if arriving is not None:
                travelling = arriving
                held = _unpack(torch, travelling, (self.k, self.v))
        return error

    def finish(self, out, lse):
        """The running states into out (and lse): block m's rows at m * Bs."""
        bs = self.block
        for m in range(2):
            if self.running[m] is None:  # a window that hides every key: no state
                raise errors.InternalError("INTERNAL", "a query block got no state")
            state, state_lse = self.running[m]
            target = out[:, m * bs:(m + 1) * bs] if not isinstance(out, _arrays.bf16) else \
                _arrays.bf16(out.array[:, m * bs:(m + 1) * bs])
            _api.merge_states([state], [state_lse], out=target, context=self.context)
            if lse is not None:
                part = state_lse if _arrays.kind_of_or_none(lse) == "torch" else \
                    state_lse.numpy()
                lse[:, :, m * bs:(m + 1) * bs] = part
