// Buffer cache of compiled code, in the LLVM dialect (mlc_mlir.pipeline.buffer_cache links it
// into every lowered module that allocates: the JIT's and the exported libraries' alike).
//
// The module's malloc/free calls (the memref.alloc / memref.dealloc of its intermediate
// buffers) are renamed to @mlc_buffer_alloc / @mlc_buffer_free. A request of at least 64 KiB
// gets a block of whole pages mapped with mmap; a freed block is kept and handed back to the
// next request of the same page count (the most recently freed first): from the second call of
// the same sizes on, every large intermediate buffer is a block the previous call used, already
// mapped and often still in cache. With glibc's malloc alone, buffers over its mmap threshold
// were unmapped on free and mapped again on the next call (a 1x64x56x56 conv2d: ~1500 page
// faults and 3 ms per call instead of 0.6 ms), and that threshold moves with what the rest of
// the process freed before (glibc raises it to the largest mmapped block freed), so the same
// code ran at either speed. Smaller requests go to malloc.
//
// Bound: the module's entry points call @mlc_buffer_call_enter / @mlc_buffer_call_exit
// (mlc_mlir.pipeline.buffer_cache adds the calls); when the last call in flight returns, a call of
// the module has ended and a new generation starts (a call may free all its blocks midway, so
// the blocks in use cannot tell where a call ends; without the entry calls, live bytes dropping
// to zero start a generation); each idle block records the generation it was freed in. A request that no idle block fits
// unmaps every idle block of an earlier generation (blocks of the current call are kept): a
// module called with the same sizes again reuses every block and never misses; one called with
// sizes that change from call to call (a prefill symbolic in the prompt length) drops the
// blocks of the earlier sizes at its first miss, so it holds the blocks of one call, not one
// set of blocks per size seen. Unmapped blocks go back to the OS (munmap), which freeing to
// malloc's heap does not guarantee. At most 512 blocks are idle; one more unmaps the oldest.
//
// Each block has a 64-byte header holding its size (the pointer returned is 64-byte aligned in
// a mapped block and keeps malloc's 16-byte alignment in a small one). The cache is guarded by
// one pthread mutex (zero bytes are glibc's PTHREAD_MUTEX_INITIALIZER) and emptied by a global
// destructor when the code is unloaded (the ExecutionEngine is destroyed, the library closed).
// Every symbol is internal: two modules in one process keep separate caches. mmap's flags are
// Linux's (PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS).
//
// The idea is ONNX Runtime's arena / PyTorch's caching allocator (blocks kept for reuse; PyTorch
// frees its cached blocks and retries when a request does not fit), bounded to one call's
// blocks as MLC-LLM's memory pool is sized by one step.
module {
  llvm.func @malloc(i64) -> !llvm.ptr
  llvm.func @free(!llvm.ptr)
  llvm.func @mmap(!llvm.ptr, i64, i32, i32, i32, i64) -> !llvm.ptr
  llvm.func @munmap(!llvm.ptr, i64) -> i32
  llvm.func @pthread_mutex_lock(!llvm.ptr) -> i32
  llvm.func @pthread_mutex_unlock(!llvm.ptr) -> i32

  llvm.mlir.global internal @mlc_buffer_cache_lock() {alignment = 8 : i64} : !llvm.array<40 x i8> {
    %0 = llvm.mlir.zero : !llvm.array<40 x i8>
    llvm.return %0 : !llvm.array<40 x i8>
  }
  // idle blocks, oldest first: sizes (bytes mapped, header included), bases, generations
  llvm.mlir.global internal @mlc_buffer_cache_sizes() {alignment = 8 : i64} : !llvm.array<512 x i64> {
    %0 = llvm.mlir.zero : !llvm.array<512 x i64>
    llvm.return %0 : !llvm.array<512 x i64>
  }
  llvm.mlir.global internal @mlc_buffer_cache_bases() {alignment = 8 : i64} : !llvm.array<512 x ptr> {
    %0 = llvm.mlir.zero : !llvm.array<512 x ptr>
    llvm.return %0 : !llvm.array<512 x ptr>
  }
  llvm.mlir.global internal @mlc_buffer_cache_gens() {alignment = 8 : i64} : !llvm.array<512 x i64> {
    %0 = llvm.mlir.zero : !llvm.array<512 x i64>
    llvm.return %0 : !llvm.array<512 x i64>
  }
  llvm.mlir.global internal @mlc_buffer_cache_gen(0 : i64) {alignment = 8 : i64} : i64
  llvm.mlir.global internal @mlc_buffer_cache_count(0 : i64) {alignment = 8 : i64} : i64
  llvm.mlir.global internal @mlc_buffer_cache_idle(0 : i64) {alignment = 8 : i64} : i64
  llvm.mlir.global internal @mlc_buffer_cache_live(0 : i64) {alignment = 8 : i64} : i64
  // calls of the module's entry points in flight
  llvm.mlir.global internal @mlc_buffer_cache_depth(0 : i64) {alignment = 8 : i64} : i64

  // An entry point of the module starts (a call, or a nested one).
  llvm.func internal @mlc_buffer_call_enter() {
    %lock = llvm.mlir.addressof @mlc_buffer_cache_lock : !llvm.ptr
    %0 = llvm.call @pthread_mutex_lock(%lock) : (!llvm.ptr) -> i32
    %depthp = llvm.mlir.addressof @mlc_buffer_cache_depth : !llvm.ptr
    %depth = llvm.load %depthp : !llvm.ptr -> i64
    %one = llvm.mlir.constant(1 : i64) : i64
    %depth1 = llvm.add %depth, %one : i64
    llvm.store %depth1, %depthp : i64, !llvm.ptr
    %1 = llvm.call @pthread_mutex_unlock(%lock) : (!llvm.ptr) -> i32
    llvm.return
  }

  // An entry point returns; the last one in flight ends the generation.
  llvm.func internal @mlc_buffer_call_exit() {
    %lock = llvm.mlir.addressof @mlc_buffer_cache_lock : !llvm.ptr
    %0 = llvm.call @pthread_mutex_lock(%lock) : (!llvm.ptr) -> i32
    %depthp = llvm.mlir.addressof @mlc_buffer_cache_depth : !llvm.ptr
    %depth = llvm.load %depthp : !llvm.ptr -> i64
    %one = llvm.mlir.constant(1 : i64) : i64
    %depth1 = llvm.sub %depth, %one : i64
    llvm.store %depth1, %depthp : i64, !llvm.ptr
    %none = llvm.mlir.constant(0 : i64) : i64
    %ended = llvm.icmp "eq" %depth1, %none : i64
    %genp = llvm.mlir.addressof @mlc_buffer_cache_gen : !llvm.ptr
    %gen = llvm.load %genp : !llvm.ptr -> i64
    %next = llvm.add %gen, %one : i64
    %gen1 = llvm.select %ended, %next, %gen : i1, i64
    llvm.store %gen1, %genp : i64, !llvm.ptr
    %1 = llvm.call @pthread_mutex_unlock(%lock) : (!llvm.ptr) -> i32
    llvm.return
  }

  // Removes idle slot %i (the lock held): later slots move down one, the order stays.
  llvm.func internal @mlc_buffer_cache_remove(%i: i64) {
    %sizes = llvm.mlir.addressof @mlc_buffer_cache_sizes : !llvm.ptr
    %bases = llvm.mlir.addressof @mlc_buffer_cache_bases : !llvm.ptr
    %countp = llvm.mlir.addressof @mlc_buffer_cache_count : !llvm.ptr
    %idlep = llvm.mlir.addressof @mlc_buffer_cache_idle : !llvm.ptr
    %n = llvm.load %countp : !llvm.ptr -> i64
    %sp = llvm.getelementptr %sizes[0, %i] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x i64>
    %s = llvm.load %sp : !llvm.ptr -> i64
    %idle = llvm.load %idlep : !llvm.ptr -> i64
    %left = llvm.sub %idle, %s : i64
    llvm.store %left, %idlep : i64, !llvm.ptr
    %one = llvm.mlir.constant(1 : i64) : i64
    %last = llvm.sub %n, %one : i64
    llvm.store %last, %countp : i64, !llvm.ptr
    llvm.br ^loop(%i : i64)
  ^loop(%j: i64):
    %more = llvm.icmp "ult" %j, %last : i64
    llvm.cond_br %more, ^move, ^done
  ^move:
    %k = llvm.add %j, %one : i64
    %from_s = llvm.getelementptr %sizes[0, %k] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x i64>
    %to_s = llvm.getelementptr %sizes[0, %j] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x i64>
    %vs = llvm.load %from_s : !llvm.ptr -> i64
    llvm.store %vs, %to_s : i64, !llvm.ptr
    %from_b = llvm.getelementptr %bases[0, %k] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x ptr>
    %to_b = llvm.getelementptr %bases[0, %j] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x ptr>
    %vb = llvm.load %from_b : !llvm.ptr -> !llvm.ptr
    llvm.store %vb, %to_b : !llvm.ptr, !llvm.ptr
    %gens = llvm.mlir.addressof @mlc_buffer_cache_gens : !llvm.ptr
    %from_g = llvm.getelementptr %gens[0, %k] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x i64>
    %to_g = llvm.getelementptr %gens[0, %j] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x i64>
    %vg = llvm.load %from_g : !llvm.ptr -> i64
    llvm.store %vg, %to_g : i64, !llvm.ptr
    llvm.br ^loop(%k : i64)
  ^done:
    llvm.return
  }

  // Unmaps idle slot %i (the lock held).
  llvm.func internal @mlc_buffer_cache_evict(%i: i64) {
    %sizes = llvm.mlir.addressof @mlc_buffer_cache_sizes : !llvm.ptr
    %bases = llvm.mlir.addressof @mlc_buffer_cache_bases : !llvm.ptr
    %sp = llvm.getelementptr %sizes[0, %i] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x i64>
    %bp = llvm.getelementptr %bases[0, %i] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x ptr>
    %s = llvm.load %sp : !llvm.ptr -> i64
    %b = llvm.load %bp : !llvm.ptr -> !llvm.ptr
    llvm.call @mlc_buffer_cache_remove(%i) : (i64) -> ()
    %0 = llvm.call @munmap(%b, %s) : (!llvm.ptr, i64) -> i32
    llvm.return
  }

  // malloc(size) for the module's buffers: below 64 KiB malloc's block, else an idle block of
  // the same page count or a new mapping (unmapping the idle blocks of earlier calls first).
  llvm.func internal @mlc_buffer_alloc(%size: i64) -> !llvm.ptr {
    %header = llvm.mlir.constant(64 : i64) : i64
    %min = llvm.mlir.constant(65536 : i64) : i64
    %big = llvm.icmp "uge" %size, %min : i64
    // size + 64 rounded up to 4 KiB must not wrap around
    %limit = llvm.mlir.constant(-8192 : i64) : i64
    %huge = llvm.icmp "ugt" %size, %limit : i64
    llvm.cond_br %huge, ^null, ^sized
  ^sized:
    llvm.cond_br %big, ^lock, ^small
  ^small:
    %total = llvm.add %size, %header : i64
    %new = llvm.call @malloc(%total) : (i64) -> !llvm.ptr
    %nullp = llvm.mlir.zero : !llvm.ptr
    %failed = llvm.icmp "eq" %new, %nullp : !llvm.ptr
    llvm.cond_br %failed, ^null, ^ok
  ^ok:
    llvm.store %size, %new : i64, !llvm.ptr
    %fresh = llvm.getelementptr %new[64] : (!llvm.ptr) -> !llvm.ptr, i8
    llvm.return %fresh : !llvm.ptr
  ^lock:
    %page = llvm.mlir.constant(4095 : i64) : i64
    %mask = llvm.mlir.constant(-4096 : i64) : i64
    %with = llvm.add %size, %header : i64
    %up = llvm.add %with, %page : i64
    %bytes = llvm.and %up, %mask : i64
    %lock = llvm.mlir.addressof @mlc_buffer_cache_lock : !llvm.ptr
    %0 = llvm.call @pthread_mutex_lock(%lock) : (!llvm.ptr) -> i32
    %countp = llvm.mlir.addressof @mlc_buffer_cache_count : !llvm.ptr
    %livep = llvm.mlir.addressof @mlc_buffer_cache_live : !llvm.ptr
    %n = llvm.load %countp : !llvm.ptr -> i64
    %one = llvm.mlir.constant(1 : i64) : i64
    %zero = llvm.mlir.constant(0 : i64) : i64
    llvm.br ^scan(%n : i64)
  ^scan(%i1: i64):   // newest first: slot i1 - 1
    %more = llvm.icmp "ugt" %i1, %zero : i64
    llvm.cond_br %more, ^check, ^miss
  ^check:
    %i = llvm.sub %i1, %one : i64
    %sizes = llvm.mlir.addressof @mlc_buffer_cache_sizes : !llvm.ptr
    %sp = llvm.getelementptr %sizes[0, %i] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x i64>
    %s = llvm.load %sp : !llvm.ptr -> i64
    %hit = llvm.icmp "eq" %s, %bytes : i64
    llvm.cond_br %hit, ^take, ^scan(%i : i64)
  ^take:
    %bases = llvm.mlir.addressof @mlc_buffer_cache_bases : !llvm.ptr
    %bp = llvm.getelementptr %bases[0, %i] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x ptr>
    %base = llvm.load %bp : !llvm.ptr -> !llvm.ptr
    llvm.call @mlc_buffer_cache_remove(%i) : (i64) -> ()
    %live = llvm.load %livep : !llvm.ptr -> i64
    %live1 = llvm.add %live, %bytes : i64
    llvm.store %live1, %livep : i64, !llvm.ptr
    %1 = llvm.call @pthread_mutex_unlock(%lock) : (!llvm.ptr) -> i32
    %cached = llvm.getelementptr %base[64] : (!llvm.ptr) -> !llvm.ptr, i8
    llvm.return %cached : !llvm.ptr
  ^miss:
    %mlive = llvm.load %livep : !llvm.ptr -> i64
    %mlive1 = llvm.add %mlive, %bytes : i64
    llvm.store %mlive1, %livep : i64, !llvm.ptr
    %genp = llvm.mlir.addressof @mlc_buffer_cache_gen : !llvm.ptr
    %gen = llvm.load %genp : !llvm.ptr -> i64
    llvm.br ^stale(%zero : i64)
  ^stale(%j: i64):   // unmap the idle blocks of earlier generations
    %m = llvm.load %countp : !llvm.ptr -> i64
    %left = llvm.icmp "ult" %j, %m : i64
    llvm.cond_br %left, ^age, ^map
  ^age:
    %gens = llvm.mlir.addressof @mlc_buffer_cache_gens : !llvm.ptr
    %gp = llvm.getelementptr %gens[0, %j] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x i64>
    %g = llvm.load %gp : !llvm.ptr -> i64
    %old = llvm.icmp "ult" %g, %gen : i64
    %j1 = llvm.add %j, %one : i64
    llvm.cond_br %old, ^evict, ^stale(%j1 : i64)
  ^evict:   // slot j now holds the next block
    llvm.call @mlc_buffer_cache_evict(%j) : (i64) -> ()
    llvm.br ^stale(%j : i64)
  ^map:
    %2 = llvm.call @pthread_mutex_unlock(%lock) : (!llvm.ptr) -> i32
    %nullp2 = llvm.mlir.zero : !llvm.ptr
    %prot = llvm.mlir.constant(3 : i32) : i32
    %flags = llvm.mlir.constant(34 : i32) : i32
    %fd = llvm.mlir.constant(-1 : i32) : i32
    %mapped = llvm.call @mmap(%nullp2, %bytes, %prot, %flags, %fd, %zero) : (!llvm.ptr, i64, i32, i32, i32, i64) -> !llvm.ptr
    %addr = llvm.ptrtoint %mapped : !llvm.ptr to i64
    %minus1 = llvm.mlir.constant(-1 : i64) : i64
    %mfailed = llvm.icmp "eq" %addr, %minus1 : i64
    llvm.cond_br %mfailed, ^unmapped, ^mapped
  ^mapped:
    llvm.store %bytes, %mapped : i64, !llvm.ptr
    %block = llvm.getelementptr %mapped[64] : (!llvm.ptr) -> !llvm.ptr, i8
    llvm.return %block : !llvm.ptr
  ^unmapped:   // not live after all
    %3 = llvm.call @pthread_mutex_lock(%lock) : (!llvm.ptr) -> i32
    %flive = llvm.load %livep : !llvm.ptr -> i64
    %flive1 = llvm.sub %flive, %bytes : i64
    llvm.store %flive1, %livep : i64, !llvm.ptr
    %4 = llvm.call @pthread_mutex_unlock(%lock) : (!llvm.ptr) -> i32
    llvm.br ^null
  ^null:
    %null = llvm.mlir.zero : !llvm.ptr
    llvm.return %null : !llvm.ptr
  }

  // free(ptr) for the module's buffers: a small block back to malloc, a mapped one kept idle in
  // the current generation (the oldest idle block unmapped when all 512 slots are taken); the
  // generation ends when no block is in use.
  llvm.func internal @mlc_buffer_free(%ptr: !llvm.ptr) {
    %nullp = llvm.mlir.zero : !llvm.ptr
    %isnull = llvm.icmp "eq" %ptr, %nullp : !llvm.ptr
    llvm.cond_br %isnull, ^done, ^block
  ^block:
    %base = llvm.getelementptr %ptr[-64] : (!llvm.ptr) -> !llvm.ptr, i8
    %size = llvm.load %base : !llvm.ptr -> i64
    %min = llvm.mlir.constant(65536 : i64) : i64
    %big = llvm.icmp "uge" %size, %min : i64
    llvm.cond_br %big, ^lock, ^release
  ^lock:
    %lock = llvm.mlir.addressof @mlc_buffer_cache_lock : !llvm.ptr
    %0 = llvm.call @pthread_mutex_lock(%lock) : (!llvm.ptr) -> i32
    %livep = llvm.mlir.addressof @mlc_buffer_cache_live : !llvm.ptr
    %live = llvm.load %livep : !llvm.ptr -> i64
    %live1 = llvm.sub %live, %size : i64
    llvm.store %live1, %livep : i64, !llvm.ptr
    %countp = llvm.mlir.addressof @mlc_buffer_cache_count : !llvm.ptr
    %n = llvm.load %countp : !llvm.ptr -> i64
    %slots = llvm.mlir.constant(512 : i64) : i64
    %full = llvm.icmp "uge" %n, %slots : i64
    llvm.cond_br %full, ^evict, ^keep
  ^evict:
    %zero = llvm.mlir.constant(0 : i64) : i64
    llvm.call @mlc_buffer_cache_evict(%zero) : (i64) -> ()
    llvm.br ^keep
  ^keep:
    %m = llvm.load %countp : !llvm.ptr -> i64
    %sizes = llvm.mlir.addressof @mlc_buffer_cache_sizes : !llvm.ptr
    %sp = llvm.getelementptr %sizes[0, %m] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x i64>
    llvm.store %size, %sp : i64, !llvm.ptr
    %bases = llvm.mlir.addressof @mlc_buffer_cache_bases : !llvm.ptr
    %bp = llvm.getelementptr %bases[0, %m] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x ptr>
    llvm.store %base, %bp : !llvm.ptr, !llvm.ptr
    %one = llvm.mlir.constant(1 : i64) : i64
    %m1 = llvm.add %m, %one : i64
    llvm.store %m1, %countp : i64, !llvm.ptr
    %idlep = llvm.mlir.addressof @mlc_buffer_cache_idle : !llvm.ptr
    %idle = llvm.load %idlep : !llvm.ptr -> i64
    %idle1 = llvm.add %idle, %size : i64
    llvm.store %idle1, %idlep : i64, !llvm.ptr
    %genp = llvm.mlir.addressof @mlc_buffer_cache_gen : !llvm.ptr
    %gen = llvm.load %genp : !llvm.ptr -> i64
    %gens = llvm.mlir.addressof @mlc_buffer_cache_gens : !llvm.ptr
    %gp = llvm.getelementptr %gens[0, %m] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x i64>
    llvm.store %gen, %gp : i64, !llvm.ptr
    %none = llvm.mlir.constant(0 : i64) : i64
    %drained = llvm.icmp "eq" %live1, %none : i64
    %depthp = llvm.mlir.addressof @mlc_buffer_cache_depth : !llvm.ptr
    %depth = llvm.load %depthp : !llvm.ptr -> i64
    %outside = llvm.icmp "eq" %depth, %none : i64
    %ended = llvm.and %drained, %outside : i1
    %next = llvm.add %gen, %one : i64
    %gen1 = llvm.select %ended, %next, %gen : i1, i64
    llvm.store %gen1, %genp : i64, !llvm.ptr
    %1 = llvm.call @pthread_mutex_unlock(%lock) : (!llvm.ptr) -> i32
    llvm.br ^done
  ^release:
    llvm.call @free(%base) : (!llvm.ptr) -> ()
    llvm.br ^done
  ^done:
    llvm.return
  }

  // Unmaps the idle blocks when the code is unloaded.
  llvm.func internal @mlc_buffer_cache_release() {
    %lock = llvm.mlir.addressof @mlc_buffer_cache_lock : !llvm.ptr
    %0 = llvm.call @pthread_mutex_lock(%lock) : (!llvm.ptr) -> i32
    %countp = llvm.mlir.addressof @mlc_buffer_cache_count : !llvm.ptr
    %zero = llvm.mlir.constant(0 : i64) : i64
    llvm.br ^loop
  ^loop:
    %n = llvm.load %countp : !llvm.ptr -> i64
    %more = llvm.icmp "ugt" %n, %zero : i64
    llvm.cond_br %more, ^body, ^end
  ^body:
    llvm.call @mlc_buffer_cache_evict(%zero) : (i64) -> ()
    llvm.br ^loop
  ^end:
    %1 = llvm.call @pthread_mutex_unlock(%lock) : (!llvm.ptr) -> i32
    llvm.return
  }

  llvm.mlir.global_dtors dtors = [@mlc_buffer_cache_release], priorities = [65535 : i32], data = [#llvm.zero]
}
