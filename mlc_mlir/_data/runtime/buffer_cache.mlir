// Buffer cache of compiled code, in the LLVM dialect (mlc_mlir.pipeline.buffer_cache links it
// into every lowered module that allocates: the JIT's and the exported libraries' alike).
//
// The module's malloc/free calls (the memref.alloc / memref.dealloc of its intermediate
// buffers) are renamed to @mlc_buffer_alloc / @mlc_buffer_free. A freed block of at least
// 64 KiB is kept and handed back to the next request of exactly its size: from the second call
// on, every intermediate buffer is a block the previous call used, already mapped and often
// still in cache. With glibc's malloc alone, buffers over its mmap threshold were unmapped on
// free and mapped again on the next call (a 1x64x56x56 conv2d: ~1500 page faults and 3 ms per
// call instead of 0.6 ms), and that threshold moves with what the rest of the process freed
// before (glibc raises it to the largest mmapped block freed), so the same code ran at either
// speed. The idea is ONNX Runtime's arena / PyTorch's caching allocator, in the simplest form
// that fits a model whose buffer sizes repeat from call to call.
//
// Each block has a 64-byte header holding its size (the pointer returned keeps malloc's 16-byte
// alignment). The cache holds at most 512 blocks and 2 GiB; it is guarded by one pthread mutex
// (zero bytes are glibc's PTHREAD_MUTEX_INITIALIZER) and emptied by a global destructor when the
// code is unloaded (the ExecutionEngine is destroyed, the library closed). Every symbol is
// internal: two modules in one process keep separate caches.
module {
  llvm.func @malloc(i64) -> !llvm.ptr
  llvm.func @free(!llvm.ptr)
  llvm.func @pthread_mutex_lock(!llvm.ptr) -> i32
  llvm.func @pthread_mutex_unlock(!llvm.ptr) -> i32

  llvm.mlir.global internal @mlc_buffer_cache_lock() {alignment = 8 : i64} : !llvm.array<40 x i8> {
    %0 = llvm.mlir.zero : !llvm.array<40 x i8>
    llvm.return %0 : !llvm.array<40 x i8>
  }
  llvm.mlir.global internal @mlc_buffer_cache_sizes() {alignment = 8 : i64} : !llvm.array<512 x i64> {
    %0 = llvm.mlir.zero : !llvm.array<512 x i64>
    llvm.return %0 : !llvm.array<512 x i64>
  }
  llvm.mlir.global internal @mlc_buffer_cache_bases() {alignment = 8 : i64} : !llvm.array<512 x ptr> {
    %0 = llvm.mlir.zero : !llvm.array<512 x ptr>
    llvm.return %0 : !llvm.array<512 x ptr>
  }
  llvm.mlir.global internal @mlc_buffer_cache_count(0 : i64) {alignment = 8 : i64} : i64
  llvm.mlir.global internal @mlc_buffer_cache_bytes(0 : i64) {alignment = 8 : i64} : i64

  // malloc(size) for the module's buffers: a cached block of exactly `size` bytes, else a new one.
  llvm.func internal @mlc_buffer_alloc(%size: i64) -> !llvm.ptr {
    %min = llvm.mlir.constant(65536 : i64) : i64
    %big = llvm.icmp "uge" %size, %min : i64
    llvm.cond_br %big, ^lock, ^fresh
  ^lock:
    %lock = llvm.mlir.addressof @mlc_buffer_cache_lock : !llvm.ptr
    %0 = llvm.call @pthread_mutex_lock(%lock) : (!llvm.ptr) -> i32
    %countp = llvm.mlir.addressof @mlc_buffer_cache_count : !llvm.ptr
    %n = llvm.load %countp : !llvm.ptr -> i64
    %zero = llvm.mlir.constant(0 : i64) : i64
    llvm.br ^scan(%zero : i64)
  ^scan(%i: i64):
    %more = llvm.icmp "ult" %i, %n : i64
    llvm.cond_br %more, ^check, ^miss
  ^check:
    %sizes = llvm.mlir.addressof @mlc_buffer_cache_sizes : !llvm.ptr
    %sp = llvm.getelementptr %sizes[0, %i] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x i64>
    %s = llvm.load %sp : !llvm.ptr -> i64
    %hit = llvm.icmp "eq" %s, %size : i64
    %one = llvm.mlir.constant(1 : i64) : i64
    %next = llvm.add %i, %one : i64
    llvm.cond_br %hit, ^take, ^scan(%next : i64)
  ^take:
    // slot i is handed out; the last slot moves into it
    %bases = llvm.mlir.addressof @mlc_buffer_cache_bases : !llvm.ptr
    %bp = llvm.getelementptr %bases[0, %i] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x ptr>
    %base = llvm.load %bp : !llvm.ptr -> !llvm.ptr
    %last = llvm.sub %n, %one : i64
    %lsp = llvm.getelementptr %sizes[0, %last] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x i64>
    %ls = llvm.load %lsp : !llvm.ptr -> i64
    llvm.store %ls, %sp : i64, !llvm.ptr
    %lbp = llvm.getelementptr %bases[0, %last] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x ptr>
    %lb = llvm.load %lbp : !llvm.ptr -> !llvm.ptr
    llvm.store %lb, %bp : !llvm.ptr, !llvm.ptr
    llvm.store %last, %countp : i64, !llvm.ptr
    %bytesp = llvm.mlir.addressof @mlc_buffer_cache_bytes : !llvm.ptr
    %bytes = llvm.load %bytesp : !llvm.ptr -> i64
    %left = llvm.sub %bytes, %size : i64
    llvm.store %left, %bytesp : i64, !llvm.ptr
    %1 = llvm.call @pthread_mutex_unlock(%lock) : (!llvm.ptr) -> i32
    %cached = llvm.getelementptr %base[64] : (!llvm.ptr) -> !llvm.ptr, i8
    llvm.return %cached : !llvm.ptr
  ^miss:
    %2 = llvm.call @pthread_mutex_unlock(%lock) : (!llvm.ptr) -> i32
    llvm.br ^fresh
  ^fresh:
    // size + 64 must not wrap around
    %limit = llvm.mlir.constant(-65 : i64) : i64
    %huge = llvm.icmp "ugt" %size, %limit : i64
    llvm.cond_br %huge, ^null, ^alloc
  ^alloc:
    %header = llvm.mlir.constant(64 : i64) : i64
    %total = llvm.add %size, %header : i64
    %new = llvm.call @malloc(%total) : (i64) -> !llvm.ptr
    %nullp = llvm.mlir.zero : !llvm.ptr
    %failed = llvm.icmp "eq" %new, %nullp : !llvm.ptr
    llvm.cond_br %failed, ^null, ^ok
  ^ok:
    llvm.store %size, %new : i64, !llvm.ptr
    %fresh = llvm.getelementptr %new[64] : (!llvm.ptr) -> !llvm.ptr, i8
    llvm.return %fresh : !llvm.ptr
  ^null:
    %null = llvm.mlir.zero : !llvm.ptr
    llvm.return %null : !llvm.ptr
  }

  // free(ptr) for the module's buffers: a block of at least 64 KiB is kept while there is room.
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
    %countp = llvm.mlir.addressof @mlc_buffer_cache_count : !llvm.ptr
    %n = llvm.load %countp : !llvm.ptr -> i64
    %bytesp = llvm.mlir.addressof @mlc_buffer_cache_bytes : !llvm.ptr
    %bytes = llvm.load %bytesp : !llvm.ptr -> i64
    %slots = llvm.mlir.constant(512 : i64) : i64
    %room = llvm.icmp "ult" %n, %slots : i64
    %total = llvm.add %bytes, %size : i64
    %max = llvm.mlir.constant(2147483648 : i64) : i64
    %fits = llvm.icmp "ule" %total, %max : i64
    %keep = llvm.and %room, %fits : i1
    llvm.cond_br %keep, ^keep, ^unlock
  ^keep:
    %sizes = llvm.mlir.addressof @mlc_buffer_cache_sizes : !llvm.ptr
    %sp = llvm.getelementptr %sizes[0, %n] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x i64>
    llvm.store %size, %sp : i64, !llvm.ptr
    %bases = llvm.mlir.addressof @mlc_buffer_cache_bases : !llvm.ptr
    %bp = llvm.getelementptr %bases[0, %n] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x ptr>
    llvm.store %base, %bp : !llvm.ptr, !llvm.ptr
    %one = llvm.mlir.constant(1 : i64) : i64
    %n1 = llvm.add %n, %one : i64
    llvm.store %n1, %countp : i64, !llvm.ptr
    llvm.store %total, %bytesp : i64, !llvm.ptr
    %1 = llvm.call @pthread_mutex_unlock(%lock) : (!llvm.ptr) -> i32
    llvm.br ^done
  ^unlock:
    %2 = llvm.call @pthread_mutex_unlock(%lock) : (!llvm.ptr) -> i32
    llvm.br ^release
  ^release:
    llvm.call @free(%base) : (!llvm.ptr) -> ()
    llvm.br ^done
  ^done:
    llvm.return
  }

  // Gives the cached blocks back when the code is unloaded.
  llvm.func internal @mlc_buffer_cache_release() {
    %lock = llvm.mlir.addressof @mlc_buffer_cache_lock : !llvm.ptr
    %0 = llvm.call @pthread_mutex_lock(%lock) : (!llvm.ptr) -> i32
    %countp = llvm.mlir.addressof @mlc_buffer_cache_count : !llvm.ptr
    %n = llvm.load %countp : !llvm.ptr -> i64
    %zero = llvm.mlir.constant(0 : i64) : i64
    llvm.br ^loop(%zero : i64)
  ^loop(%i: i64):
    %more = llvm.icmp "ult" %i, %n : i64
    llvm.cond_br %more, ^body, ^end
  ^body:
    %bases = llvm.mlir.addressof @mlc_buffer_cache_bases : !llvm.ptr
    %bp = llvm.getelementptr %bases[0, %i] : (!llvm.ptr, i64) -> !llvm.ptr, !llvm.array<512 x ptr>
    %base = llvm.load %bp : !llvm.ptr -> !llvm.ptr
    llvm.call @free(%base) : (!llvm.ptr) -> ()
    %one = llvm.mlir.constant(1 : i64) : i64
    %next = llvm.add %i, %one : i64
    llvm.br ^loop(%next : i64)
  ^end:
    llvm.store %zero, %countp : i64, !llvm.ptr
    %bytesp = llvm.mlir.addressof @mlc_buffer_cache_bytes : !llvm.ptr
    llvm.store %zero, %bytesp : i64, !llvm.ptr
    %1 = llvm.call @pthread_mutex_unlock(%lock) : (!llvm.ptr) -> i32
    llvm.return
  }

  llvm.mlir.global_dtors dtors = [@mlc_buffer_cache_release], priorities = [65535 : i32], data = [#llvm.zero]
}
