/*
 * Dragon plugin C ABI, version 1.
 *
 * This header is the whole contract between the Dragon core and a plugin.
 * It is pure C so that any compiler (and any C++ standard library) can build
 * a plugin. Rules, also explained in docs/abi.md:
 *
 *  - A plugin exports exactly one symbol, dragon_plugin_entry_v1(), and
 *    imports no symbol from the core: everything it may call arrives through
 *    the DgHostApi table handed to its init function.
 *  - Every struct starts with `struct_size`. Structs only ever grow at the
 *    end. A reader ignores fields beyond what it knows and never touches a
 *    field (or calls a slot) that lies beyond the writer's struct_size.
 *  - DG_ABI_MAJOR changes break compatibility; the core refuses a plugin of a
 *    different major. DG_ABI_MINOR grows when fields are appended; a plugin
 *    states the minimum host minor it needs and the core refuses it at load
 *    time when the host is older.
 *  - No C++ exception ever crosses this boundary. Failures are DgStatus codes
 *    plus a message given to host->set_error().
 *  - Whoever allocates frees. The core allocates kernel outputs (their shapes
 *    come from shape inference); scratch memory comes from
 *    host->alloc_workspace() and lives until the kernel returns.
 */
#ifndef DRAGON_PLUGIN_H_
#define DRAGON_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DG_ABI_MAJOR 1
/* Minor history: 1.0 first release; 1.1 adds DG_OP_CONTROL; 1.2 gives
 * DgCallFrame.call_site_state a meaning (DgCallSiteState); 1.3 adds
 * asynchronous devices (DgDeviceDef.flags and the entries after it: current
 * device, default stream, events, pinned host memory, peer copies,
 * attributes, memory info, error_message), DG_ABORTED,
 * DG_DEADLINE_EXCEEDED and DG_OP_COLLECTIVE; 1.4 adds the dtypes DG_UINT16,
 * DG_UINT32 and DG_UINT64 (codes 10-12) and the masks DG_MASK_UINT_WIDE,
 * DG_MASK_UINT, DG_MASK_ANY_INT, DG_MASK_ANY_NUMERIC and DG_MASK_ANY; 1.5
 * adds the optional graph-capture entries of DgDeviceDef
 * (stream_begin_capture, stream_end_capture, graph_launch, graph_destroy);
 * 1.6 adds the kernel trait DG_KERNEL_CHANNELS_LAST. */
#define DG_ABI_MINOR 6

#if defined(_WIN32)
#define DG_EXPORT __declspec(dllexport)
#else
#define DG_EXPORT __attribute__((visibility("default")))
#endif

/* ------------------------------------------------------------------ status */

typedef int32_t DgStatus;
enum {
  DG_OK = 0,
  DG_INVALID_ARGUMENT = 1,  /* bad shapes, dtypes, attribute values */
  DG_NOT_FOUND = 2,         /* unknown op, device, attribute */
  DG_UNIMPLEMENTED = 3,     /* a case this kernel does not handle */
  DG_RESOURCE_EXHAUSTED = 4,/* out of memory */
  DG_INTERNAL = 5,          /* a bug */
  DG_OUT_OF_RANGE = 6,      /* index out of bounds */
  DG_FAILED_PRECONDITION = 7,
  DG_UNAVAILABLE = 8,       /* e.g. no such device present at run time */
  /* ABI >= 1.3 */
  DG_ABORTED = 9,           /* the device or a peer gave up (lost device,
                               aborted collective); the device may be unusable */
  DG_DEADLINE_EXCEEDED = 10 /* a wait (collective, event) timed out */
};

/* ------------------------------------------------------------------ dtypes */

/* Codes are stable forever (they are stored in saved graphs). */
typedef int32_t DgDType;
enum {
  DG_BOOL = 0,
  DG_UINT8 = 1,
  DG_INT8 = 2,
  DG_INT16 = 3,
  DG_INT32 = 4,
  DG_INT64 = 5,
  DG_FLOAT16 = 6,
  DG_BFLOAT16 = 7,
  DG_FLOAT32 = 8,
  DG_FLOAT64 = 9,
  /* ABI >= 1.4 */
  DG_UINT16 = 10,
  DG_UINT32 = 11,
  DG_UINT64 = 12,
  DG_NUM_DTYPES = 13 /* grows with the minor: a reader bounds-checks codes */
};

/* A set of dtypes as a bit mask: bit (1u << code). */
typedef uint32_t DgDTypeMask;
#define DG_DTYPE_BIT(code) ((DgDTypeMask)1u << (code))
#define DG_MASK_FLOAT                                                  \
  (DG_DTYPE_BIT(DG_FLOAT16) | DG_DTYPE_BIT(DG_BFLOAT16) |              \
   DG_DTYPE_BIT(DG_FLOAT32) | DG_DTYPE_BIT(DG_FLOAT64))
#define DG_MASK_SIGNED_INT                                             \
  (DG_DTYPE_BIT(DG_INT8) | DG_DTYPE_BIT(DG_INT16) |                    \
   DG_DTYPE_BIT(DG_INT32) | DG_DTYPE_BIT(DG_INT64))
#define DG_MASK_INT (DG_MASK_SIGNED_INT | DG_DTYPE_BIT(DG_UINT8))
#define DG_MASK_NUMERIC (DG_MASK_FLOAT | DG_MASK_INT)
#define DG_MASK_ALL (DG_MASK_NUMERIC | DG_DTYPE_BIT(DG_BOOL))
/* ABI >= 1.4. DG_MASK_INT, DG_MASK_NUMERIC and DG_MASK_ALL keep their 1.3
 * values (the ten dtypes of 1.0-1.3), so that a kernel or schema written
 * with them never receives a dtype it was not written for, also after a
 * rebuild against this header. Code that handles the wide unsigned types
 * opts in with the masks below. */
#define DG_MASK_UINT_WIDE                                              \
  (DG_DTYPE_BIT(DG_UINT16) | DG_DTYPE_BIT(DG_UINT32) |                 \
   DG_DTYPE_BIT(DG_UINT64))
#define DG_MASK_UINT (DG_DTYPE_BIT(DG_UINT8) | DG_MASK_UINT_WIDE)
#define DG_MASK_ANY_INT (DG_MASK_INT | DG_MASK_UINT_WIDE)
#define DG_MASK_ANY_NUMERIC (DG_MASK_NUMERIC | DG_MASK_UINT_WIDE)
#define DG_MASK_ANY (DG_MASK_ALL | DG_MASK_UINT_WIDE)

/* ------------------------------------------------------------------ tensors */

/* A device: the type id the host assigned to a registered device name
 * ("cpu" is always type 0) and the ordinal within that type. */
typedef struct DgDevice {
  int32_t type;
  int32_t index;
} DgDevice;

/* A DLPack-compatible view of a tensor. `shape` and `strides` are always set
 * (strides in elements, as in DLPack). The first element lives at
 * (char*)data + byte_offset. During shape inference `data` is NULL. */
typedef struct DgTensorView {
  uint32_t struct_size;
  DgDType dtype;
  void* data;
  int64_t byte_offset;
  DgDevice device;
  int32_t ndim;
  const int64_t* shape;
  const int64_t* strides;
} DgTensorView;

/* -------------------------------------------------------------- attributes */

typedef int32_t DgAttrType;
enum {
  DG_ATTR_INT = 1,     /* value.i */
  DG_ATTR_FLOAT = 2,   /* value.f */
  DG_ATTR_BOOL = 3,    /* value.i (0 or 1) */
  DG_ATTR_STRING = 4,  /* value.s, NUL-terminated */
  DG_ATTR_INTS = 5,    /* value.ints[0..count) */
  DG_ATTR_FLOATS = 6,  /* value.floats[0..count) */
  DG_ATTR_DTYPE = 7    /* value.i holds a DgDType */
};

/* A typed attribute value. `present` is 0 for an optional attribute the
 * caller left unset (e.g. `axes=None` for a reduction over all axes). */
typedef struct DgAttrValue {
  uint32_t struct_size;
  DgAttrType type;
  int32_t present;
  int64_t i;
  double f;
  const char* s;
  const int64_t* ints;
  const double* floats;
  int64_t count;
} DgAttrValue;

/* --------------------------------------------------------------- host API */

struct DgHostApi;

/* Per-call-site state (ABI 1.2). An op of a compiled graph is one call
 * site: the core gives its kernel the same DgCallSiteState on every run of
 * the graph, zero-filled at first, so a kernel can keep what it derives
 * from inputs that do not change between runs -- a convolution's weights
 * reordered into the layout its primitive wants, as onnxruntime pre-packs
 * its initializers. Eager calls, and plugins built against ABI < 1.2, get
 * call_site_state == NULL.
 *
 *  - constant_inputs: bit i (i < 64) is set when input i is a constant of
 *    the graph: the core feeds the same storage on every run and nothing
 *    writes it while the graph lives (a frozen parameter, a folded value).
 *    Anything derived from other inputs must be recomputed on every call.
 *  - data / destroy: the kernel's. When the graph is destroyed, or another
 *    kernel is chosen for the call site, the core calls destroy(data) (if
 *    both are set) and zero-fills them again.
 *  - Runs of one graph do not overlap, so a kernel needs no lock for its
 *    state; it must stay correct if it finds data == NULL on any call. */
typedef struct DgCallSiteState {
  uint32_t struct_size;
  uint64_t constant_inputs;
  void* data;
  void (*destroy)(void* data);
} DgCallSiteState;

/* Everything a kernel receives. Inputs, outputs and attributes are in schema
 * order; every attribute of the schema is present in `attrs` (defaults are
 * filled in by the core), with its name in `attr_names`. Outputs are
 * allocated by the core with the shapes shape inference produced. */
typedef struct DgCallFrame {
  uint32_t struct_size;
  const char* op_name;
  int32_t num_inputs;
  const DgTensorView* const* inputs;
  int32_t num_outputs;
  const DgTensorView* const* outputs;
  int32_t num_attrs;
  const DgAttrValue* const* attrs;
  const char* const* attr_names;
  DgDevice device;
  void* stream;            /* the device stream to run on; NULL on "cpu" */
  void* kernel_data;       /* DgKernelDef.user_data */
  void* call_site_state;   /* ABI >= 1.2: a DgCallSiteState* in graph
                              mode, else NULL (NULL before 1.2) */
  void* host_ctx;          /* pass to host->set_error / alloc_workspace */
  const struct DgHostApi* host;
} DgCallFrame;

/* Shape and dtype inference. Reads inputs (data == NULL) and attributes,
 * reports each output through host->set_output(). */
typedef struct DgInferContext {
  uint32_t struct_size;
  const char* op_name;
  int32_t num_inputs;
  const DgTensorView* const* inputs;
  int32_t num_attrs;
  const DgAttrValue* const* attrs;
  const char* const* attr_names;
  void* op_data;           /* DgOpDef.user_data */
  void* host_ctx;
  const struct DgHostApi* host;
} DgInferContext;

typedef DgStatus (*DgKernelFn)(const DgCallFrame* frame);
/* Optional: return non-zero when the kernel handles this call. Used for
 * selection only; must be cheap and must not fail. */
typedef int32_t (*DgSupportsFn)(const DgCallFrame* frame);
typedef DgStatus (*DgInferFn)(const DgInferContext* ctx);

/* The host's function table. Grows only at the end: check struct_size (or
 * use DG_HOST_HAS) before calling a slot added after ABI 1.0. */
typedef struct DgHostApi {
  uint32_t struct_size;
  uint32_t abi_major;
  uint32_t abi_minor;
  const char* core_version;
  /* Record an error for the current call; the core adds plugin, op and
   * kernel names. Returns `code` so kernels can `return host->set_error(..)`. */
  DgStatus (*set_error)(void* host_ctx, DgStatus code, const char* message);
  /* Scratch memory on the call's device, freed by the core after the call.
   * Returns NULL (and records an error) when out of memory. */
  void* (*alloc_workspace)(void* host_ctx, size_t bytes);
  /* Shape inference: declare output `index`. */
  DgStatus (*set_output)(void* host_ctx, int32_t index, DgDType dtype,
                         int32_t ndim, const int64_t* shape);
  /* Logging: level 0 debug, 1 info, 2 warning, 3 error. */
  void (*log)(int32_t level, const char* message);
  /* Number of threads the core wants a CPU kernel to use (>= 1). */
  int32_t (*num_threads)(void);
} DgHostApi;

#define DG_HOST_HAS(host, field)                                         \
  ((host)->struct_size >= offsetof(DgHostApi, field) + sizeof((host)->field))

/* ------------------------------------------------------------ definitions */

/* Argument flags. */
enum {
  DG_ARG_VARIADIC = 1u << 0,  /* last input/output only: zero or more */
  DG_ARG_OPTIONAL = 1u << 1,  /* may be absent (trailing inputs only) */
  DG_ARG_NO_GRAD = 1u << 2    /* not differentiable (indices, masks, ...) */
};

typedef struct DgArgDef {
  uint32_t struct_size;
  const char* name;
  DgDTypeMask dtypes;  /* accepted dtypes */
  uint32_t flags;
  const char* doc;
} DgArgDef;

enum {
  DG_ATTR_REQUIRED = 1u << 0, /* no default: the caller must give it */
  DG_ATTR_OPTIONAL = 1u << 1  /* may be left unset (present == 0) */
};

typedef struct DgAttrDef {
  uint32_t struct_size;
  const char* name;
  DgAttrType type;
  uint32_t flags;
  const DgAttrValue* default_value; /* NULL when required or optional */
  const char* doc;
} DgAttrDef;

/* Op flags. */
enum {
  DG_OP_STATEFUL = 1u << 0,      /* random or side effects: never CSE'd */
  DG_OP_SAME_DTYPE = 1u << 1,    /* all inputs must share one dtype */
  DG_OP_NO_GRAD = 1u << 2,       /* not differentiable at all */
  DG_OP_CONTROL = 1u << 3,       /* run by the graph executor, no kernel */
  /* ABI >= 1.3: a collective (all_reduce, ...). Never pruned, never merged
   * by CSE, never constant-folded, never reordered against another
   * collective (every rank must issue them in one order); run eagerly with
   * the GIL released. */
  DG_OP_COLLECTIVE = 1u << 4
};

typedef struct DgOpDef {
  uint32_t struct_size;
  const char* name;       /* CamelCase, e.g. "Add" */
  const char* py_name;    /* snake_case Python name, e.g. "add" */
  const char* doc;
  int32_t num_inputs;
  const DgArgDef* inputs;
  int32_t num_outputs;
  const DgArgDef* outputs;
  int32_t num_attrs;
  const DgAttrDef* attrs;
  uint32_t flags;
  /* Which tensor's dtype selects the kernel: the input of that index, or,
   * when the op has no inputs, output 0. */
  int32_t dispatch_input;
  /* Inputs that may be overwritten by output 0 (bit i = input i). */
  uint32_t inplace_inputs;
  DgInferFn infer;
  void* user_data;
} DgOpDef;

/* Kernel traits. */
enum {
  /* The kernel reads inputs through their strides; without this trait the
   * core hands it contiguous inputs (copying when needed). */
  DG_KERNEL_STRIDED_INPUTS = 1u << 0,
  /* Output 0 may alias input 0. */
  DG_KERNEL_INPLACE = 1u << 1,
  /* (ABI 1.6) The kernel reads a channels-last input 0 natively: a 4-D
   * input 0 whose strides are NHWC's over its logical NCHW shape (5-D:
   * NDHWC over NCDHW) reaches it as is, and the core then allocates output
   * 0 channels-last too (eager calls; a graph's planned buffers stay
   * contiguous). Such a kernel must read the strides of input 0 and of
   * output 0 (each is contiguous or channels-last) and of every other
   * input (each contiguous or channels-last; anything else the core makes
   * contiguous first). A core older than 1.6 ignores the bit and hands the
   * kernel contiguous tensors, which it must accept too. */
  DG_KERNEL_CHANNELS_LAST = 1u << 2
};

typedef struct DgKernelDef {
  uint32_t struct_size;
  const char* op;
  const char* device_type; /* a registered device name, e.g. "cpu" */
  DgDTypeMask dtypes;      /* dtypes of the dispatch tensor it accepts */
  int32_t priority;        /* higher wins; cpu reference kernels use 0 */
  uint32_t traits;
  DgKernelFn fn;
  DgSupportsFn supports;   /* optional */
  void* user_data;         /* reaches the kernel as frame->kernel_data */
  const char* name;        /* for explain() and error messages */
} DgKernelDef;

/* A device type: memory, copies, streams. All functions receive the
 * device's user_data and the device ordinal. */
typedef struct DgDeviceDef {
  uint32_t struct_size;
  const char* name;
  void* user_data;
  /* Number of devices of this type present now (0 is legal). */
  int32_t (*count)(void* user_data);
  DgStatus (*alloc)(void* user_data, int32_t index, size_t bytes, void** ptr);
  void (*free)(void* user_data, int32_t index, void* ptr);
  DgStatus (*copy_h2d)(void* user_data, int32_t index, void* dst,
                       const void* src, size_t bytes, void* stream);
  DgStatus (*copy_d2h)(void* user_data, int32_t index, void* dst,
                       const void* src, size_t bytes, void* stream);
  DgStatus (*copy_d2d)(void* user_data, int32_t index, void* dst,
                       const void* src, size_t bytes, void* stream);
  DgStatus (*memset)(void* user_data, int32_t index, void* dst, int32_t value,
                     size_t bytes, void* stream);
  DgStatus (*stream_create)(void* user_data, int32_t index, void** stream);
  DgStatus (*stream_destroy)(void* user_data, int32_t index, void* stream);
  DgStatus (*stream_sync)(void* user_data, int32_t index, void* stream);
  DgStatus (*synchronize)(void* user_data, int32_t index);
  /* Human-readable name of device `index` into buf (may be NULL). */
  DgStatus (*describe)(void* user_data, int32_t index, char* buf, size_t len);
  /* Non-zero when the host CPU may read this device's memory directly. */
  int32_t host_accessible;
  /* DLPack device type for zero-copy exchange (kDLCPU = 1, kDLCUDA = 2,
   * ...); 0 when the device's tensors cannot be exported. */
  int32_t dlpack_device_type;

  /* ---- ABI >= 1.3: asynchronous devices. A device that leaves all of
   * these zero keeps the synchronous contract of 1.0-1.2: the core calls
   * `synchronize` after every copy and never waits on anything else.
   *
   * A device that sets DG_DEVICE_STREAM_ORDERED in `flags` promises:
   *  - kernels and copies run in the order they were issued on one stream
   *    (frame->stream, the `stream` argument of copies), possibly after
   *    the call returned;
   *  - copy_h2d has consumed `src` when it returns (the host buffer may be
   *    reused at once), unless `src` is pinned memory from host_alloc; its
   *    write to `dst` is ordered on the stream;
   *  - copy_d2h's `dst` is valid once the stream has passed the copy (the
   *    core waits with stream_sync or an event before reading it);
   *  - default_stream and the event entries are set;
   *  - a failure of work that already returned DG_OK is sticky: the next
   *    stream_sync / event_synchronize / synchronize returns its status and
   *    error_message explains it.
   * Streams and events are opaque handles owned by the device; the core
   * destroys what it created. All entries may be called from any thread. */
  uint32_t flags;  /* DG_DEVICE_* bits */
  /* Make `index` the calling thread's current device (as cudaSetDevice).
   * The core calls it before a batch of work on `index` from a thread. */
  DgStatus (*activate)(void* user_data, int32_t index);
  /* The stream work goes to unless the user picked another (never NULL on
   * a stream-ordered device; owned by the device, never destroyed). */
  DgStatus (*default_stream)(void* user_data, int32_t index, void** stream);
  DgStatus (*event_create)(void* user_data, int32_t index, void** event);
  DgStatus (*event_destroy)(void* user_data, int32_t index, void* event);
  /* Capture the work issued on `stream` so far; re-recording moves it. */
  DgStatus (*event_record)(void* user_data, int32_t index, void* event,
                           void* stream);
  /* *done = 1 once the captured work has finished (1 for a never-recorded
   * event); never blocks. */
  DgStatus (*event_query)(void* user_data, int32_t index, void* event,
                          int32_t* done);
  /* Block the calling host thread until the captured work has finished. */
  DgStatus (*event_synchronize)(void* user_data, int32_t index, void* event);
  /* Work issued on `stream` after this call waits for the work `event`
   * captured when this call was made (a later re-record does not matter).
   * Never blocks the host. */
  DgStatus (*stream_wait_event)(void* user_data, int32_t index, void* stream,
                                void* event);
  /* Milliseconds between two recorded, finished events. */
  DgStatus (*event_elapsed_ms)(void* user_data, int32_t index, void* start,
                               void* end, float* ms);
  /* Page-locked host memory for copies that do not block the host; the
   * core owns the pointer until host_free. NULL entries: no pinned memory. */
  DgStatus (*host_alloc)(void* user_data, int32_t index, size_t bytes,
                         void** ptr);
  void (*host_free)(void* user_data, int32_t index, void* ptr);
  /* Copy between two devices of this type, ordered on `stream` (a stream
   * of `dst_index`); NULL when peers cannot copy directly (the core stages
   * through the host). */
  DgStatus (*copy_peer)(void* user_data, int32_t dst_index, void* dst,
                        int32_t src_index, const void* src, size_t bytes,
                        void* stream);
  /* A numeric device attribute (DG_DEVICE_ATTR_*); DG_NOT_FOUND when the
   * device does not know it. */
  DgStatus (*get_attribute)(void* user_data, int32_t index, int32_t attr,
                            int64_t* value);
  /* Free and total bytes of device memory as the device sees them. */
  DgStatus (*memory_info)(void* user_data, int32_t index, size_t* free_bytes,
                          size_t* total_bytes);
  /* A human-readable explanation of the last failed call of this table on
   * this device from this thread, or of a sticky asynchronous failure;
   * NULL or "" when there is none. The string stays valid until the next
   * call of this table from the same thread. */
  const char* (*error_message)(void* user_data, int32_t index);

  /* ---- ABI >= 1.5: graph capture (optional; a stream-ordered device that
   * leaves them NULL simply runs compiled functions op by op). The core
   * uses them to record the steady-state run of a compiled function once
   * and replay it (CUDA Graphs): docs/devices.md, "Graph capture".
   *
   * stream_begin_capture: from now on, work issued on `stream` *from the
   *   calling thread* is recorded, not run (kernels, copies, memsets, event
   *   records and waits on that stream). While capturing, the device must
   *   refuse (return an error from) anything whose effect a replay could
   *   not repeat: a host wait on the stream (stream_sync, synchronize, an
   *   event_synchronize of a recorded event), a copy to or from pageable
   *   host memory. Memory allocation (alloc) stays allowed; the core never
   *   frees device memory while a capture is open.
   * stream_end_capture: stops recording on `stream` (always, also when the
   *   capture failed) and returns in *graph an executable handle of what was
   *   recorded; when something issued during the capture was refused or the
   *   capture was otherwise invalidated it returns an error, *graph = NULL,
   *   and error_message says why.
   * graph_launch: issues the recorded work on `stream` (any stream of the
   *   same device), ordered like one kernel; it reads and writes the same
   *   addresses the recorded work did.
   * graph_destroy: frees the handle; work already launched still runs. */
  DgStatus (*stream_begin_capture)(void* user_data, int32_t index, void* stream);
  DgStatus (*stream_end_capture)(void* user_data, int32_t index, void* stream,
                                 void** graph);
  DgStatus (*graph_launch)(void* user_data, int32_t index, void* graph,
                           void* stream);
  DgStatus (*graph_destroy)(void* user_data, int32_t index, void* graph);
} DgDeviceDef;

/* DgDeviceDef.flags (ABI >= 1.3). */
enum {
  /* Kernels and copies are asynchronous and ordered per stream (see the
   * ABI 1.3 block of DgDeviceDef). */
  DG_DEVICE_STREAM_ORDERED = 1u << 0
};

/* DgDeviceDef.get_attribute codes (ABI >= 1.3). Stable forever. */
enum {
  DG_DEVICE_ATTR_COMPUTE_UNITS = 1,      /* SMs, CUs, cores */
  DG_DEVICE_ATTR_TOTAL_MEMORY = 2,       /* bytes */
  DG_DEVICE_ATTR_COMPUTE_CAPABILITY = 3, /* vendor-defined, e.g. 90 */
  DG_DEVICE_ATTR_MAX_STREAMS = 4,        /* 0: unlimited */
  DG_DEVICE_ATTR_MEMORY_ALIGNMENT = 5,   /* bytes guaranteed by alloc */
  DG_DEVICE_ATTR_UNIFIED_ADDRESSING = 6  /* 1 when pointers are unique
                                            across devices and the host */
};

/* Handed to init(). Registrations are buffered by the core and committed
 * only if init returns DG_OK, so a failing plugin leaves nothing behind. */
typedef struct DgRegistrar {
  uint32_t struct_size;
  void* ctx;
  DgStatus (*define_op)(void* ctx, const DgOpDef* def);
  DgStatus (*register_kernel)(void* ctx, const DgKernelDef* def);
  DgStatus (*register_device)(void* ctx, const DgDeviceDef* def);
  /* Explain why init failed; the core shows it in `dragon_core info`. */
  void (*set_error)(void* ctx, const char* message);
} DgRegistrar;

/* ------------------------------------------------------------ entry point */

typedef struct DgPluginInfo {
  uint32_t struct_size;
  const char* name;          /* e.g. "cpu_eigen" */
  const char* version;       /* the plugin's own version */
  uint32_t abi_major;        /* DG_ABI_MAJOR it was built against */
  uint32_t abi_minor;        /* DG_ABI_MINOR it was built against */
  uint32_t min_host_minor;   /* oldest host ABI minor it can run with */
  DgStatus (*init)(const DgHostApi* host, DgRegistrar* registrar);
} DgPluginInfo;

#define DG_PLUGIN_ENTRY_SYMBOL "dragon_plugin_entry_v1"
typedef const DgPluginInfo* (*DgPluginEntryFn)(void);

/* ---------------------------------------------------------------- ABI note */

/* The ABI numbers again, as an ELF note the core reads from the file before
 * it opens the library, so that a plugin it must refuse never runs any code
 * (not even its static constructors). DG_PLUGIN / DG_PLUGIN_EX (plugin.hpp)
 * emit it; a plugin that writes dragon_plugin_entry_v1 by hand puts
 * DG_ABI_NOTE(major, minor, min_host_minor) once at file scope, with the
 * numbers its DgPluginInfo states. The note: owner "Dragon", type
 * DG_ABI_NOTE_TYPE, descriptor three uint32_t {abi_major, abi_minor,
 * min_host_minor}, in section DG_ABI_NOTE_SECTION. The note is not part of
 * any struct layout: a core that does not know it ignores it. A library
 * without it (built with an older SDK) still loads: the core then checks
 * the numbers of DgPluginInfo, after dlopen. */
#define DG_ABI_NOTE_SECTION ".note.dragon.abi"
#define DG_ABI_NOTE_OWNER "Dragon"
#define DG_ABI_NOTE_TYPE 0x44474131u /* "DGA1" */
#if defined(__ELF__)
#define DG_ABI_NOTE(MAJOR, MINOR, MIN_HOST_MINOR)                           \
  __attribute__((used, section(DG_ABI_NOTE_SECTION), aligned(4)))         \
  static const struct {                                                   \
    uint32_t namesz, descsz, type;                                        \
    char owner[8];                                                        \
    uint32_t desc[3];                                                     \
  } dg_abi_note_ = {7, 12, DG_ABI_NOTE_TYPE, DG_ABI_NOTE_OWNER,           \
                    {(MAJOR), (MINOR), (MIN_HOST_MINOR)}}
#else
#define DG_ABI_NOTE(MAJOR, MINOR, MIN_HOST_MINOR) \
  typedef int dg_abi_note_unused_
#endif

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* DRAGON_PLUGIN_H_ */
