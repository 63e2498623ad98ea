// dycl_runtime: run a dycl_iree bundle's compiled host (`main` in its vmfb) from C.
//
// A bundle exported with the compiled host holds the whole dynamic network (branches, loops,
// early exits) in one vmfb function, `main`. This library loads that vmfb (embedded in the
// binary or from a file) into IREE's runtime, creates the device, checks every input against the
// bundle's signature before any device work, calls `main` and copies the results into buffers the
// caller owns. `python -m dycl_iree emit-c` generates a typed function per bundle on top of this
// API (e.g. `early_exit_run(model, x, logits, &exit_index)`); most applications use only that.
//
// Example (the generic API; the generated code does exactly this):
//
//   dycl_model_options_t options;
//   dycl_model_options_initialize(&options);          // device "local-sync"
//   dycl_model_t* model = NULL;
//   IREE_CHECK_OK(dycl_model_create_from_file(&options, &early_exit_signature,
//                                             "early_exit.dycl/llvm-cpu.vmfb", &model));
//   float x[8] = {...}, logits[4];
//   dycl_value_t inputs[1] = {dycl_value_tensor(x, 2, (int64_t[]){1, 8})};
//   dycl_value_t outputs[2] = {dycl_value_output(logits, 4), dycl_value_int(0)};
//   iree_status_t status = dycl_model_call(model, inputs, outputs);
//   // outputs[1].i64 is the exit taken; outputs[0].tensor.shape is {1, 4}
//   dycl_model_release(model);
//
// Errors: every function that can fail returns an iree_status_t (IREE's own type, so IREE's
// messages pass through unchanged); check it with iree_status_is_ok and free it with
// iree_status_free / iree_status_ignore, or print it with iree_status_fprint. Bad inputs give
// IREE_STATUS_INVALID_ARGUMENT naming the input, the expected and the actual shape; a result
// larger than its buffer gives IREE_STATUS_RESOURCE_EXHAUSTED naming the size it needs.
//
// Ownership: a dycl_model_t owns its IREE instance, device and session unless the options pass
// ones to share (they are then retained, and released with the model). Signatures and vmfb
// memory passed to the create functions are borrowed and must outlive the model (the generated
// code passes static data). Input and output buffers are the caller's; a call copies inputs in
// and results out and keeps no pointer to either after it returns.
//
// Thread-safety: calls on one dycl_model_t must not overlap (the model reuses its argument
// lists between calls); use one model per thread. Different models may be called at the same
// time from different threads, also when they share an instance and a device (IREE's devices
// are thread-safe). Creating and releasing a model must not overlap with calls on it. There is
// no global state: nothing here needs initialization or cleanup besides the model itself.

#ifndef DYCL_RUNTIME_H_
#define DYCL_RUNTIME_H_

#include <stdbool.h>
#include <stdint.h>

#include "iree/runtime/api.h"

#ifdef __cplusplus
extern "C" {
#endif

// The calling convention of `main` this runtime passes (a bundle manifest's "main_abi"): every input
// and output is a buffer view; an int is a 0-d int64 tensor, a float a 0-d float32 tensor, a bool
// a 0-d bool tensor (one byte). The typed API below still takes int64_t, float and bool. A vmfb or
// a generated signature of another main_abi is refused at load time (IREE_STATUS_FAILED_PRECONDITION).
#define DYCL_MAIN_ABI 2

// The largest tensor rank a signature may use.
#define DYCL_MAX_RANK 8
// A dim of a signature's shape whose size varies at run time (`None` in the manifest).
#define DYCL_DYNAMIC_DIM INT64_C(-1)

// What kind of value an input or output is (the manifest's "kind").
typedef enum dycl_kind_e {
  DYCL_KIND_TENSOR = 0,
  DYCL_KIND_INT = 1,    // int64_t (a 0-d int64 tensor in `main`)
  DYCL_KIND_FLOAT = 2,  // float (a 0-d float32 tensor: IREE demotes a Python float to f32)
  DYCL_KIND_BOOL = 3,   // bool (a 0-d bool tensor, one byte)
} dycl_kind_t;

// Element types of tensors (the manifest's "dtype"); bool tensors hold one byte per element.
typedef enum dycl_dtype_e {
  DYCL_DTYPE_FLOAT32 = 0,
  DYCL_DTYPE_FLOAT64,
  DYCL_DTYPE_FLOAT16,
  DYCL_DTYPE_INT64,
  DYCL_DTYPE_INT32,
  DYCL_DTYPE_INT16,
  DYCL_DTYPE_INT8,
  DYCL_DTYPE_UINT8,
  DYCL_DTYPE_BOOL,
} dycl_dtype_t;

// Bytes per element of |dtype|.
iree_host_size_t dycl_dtype_size(dycl_dtype_t dtype);
// The manifest's name of |dtype| ("float32", "int64", ...).
const char* dycl_dtype_name(dycl_dtype_t dtype);

// One input or output of a bundle's `main`, as the manifest describes it.
typedef struct dycl_value_spec_t {
  const char* name;      // the model's argument name (inputs) or "output<i>"
  dycl_kind_t kind;
  dycl_dtype_t dtype;    // tensors only
  iree_host_size_t rank;  // tensors only
  const int64_t* shape;  // tensors only: |rank| sizes, DYCL_DYNAMIC_DIM where the size varies
} dycl_value_spec_t;

// The signature of a bundle's `main`; the generated code defines one per bundle.
typedef struct dycl_signature_t {
  const char* model;        // the model's class name
  const char* module_name;  // the vmfb's module; `main` is looked up as "<module_name>.main"
  iree_host_size_t input_count;
  const dycl_value_spec_t* inputs;
  iree_host_size_t output_count;
  const dycl_value_spec_t* outputs;
  int main_abi;  // the calling convention the signature was generated for: DYCL_MAIN_ABI
  // Whether a model on a CPU driver reuses its transient buffers by default (dycl_buffer_reuse_t):
  // true when the bundle's shapes are all static, so every call asks the same sizes.
  bool reuse_buffers;
} dycl_signature_t;

// A tensor passed in or returned. Elements are dense, row-major (C order).
typedef struct dycl_tensor_t {
  // Inputs: the elements read (not written). Outputs: where the result's elements are written.
  void* data;
  // Outputs: how many elements fit at |data| (ignored for inputs).
  iree_host_size_t capacity;
  // Inputs: set by the caller. Outputs: set by the call to the result's shape.
  iree_host_size_t rank;
  int64_t shape[DYCL_MAX_RANK];
} dycl_tensor_t;

// One argument or result of a call; |kind| must match the signature's.
typedef struct dycl_value_t {
  dycl_kind_t kind;
  union {
    dycl_tensor_t tensor;
    int64_t i64;
    float f32;
    bool boolean;
  };
} dycl_value_t;

// A tensor input of |rank| dims with the given sizes.
dycl_value_t dycl_value_tensor(const void* data, iree_host_size_t rank, const int64_t* shape);
// A tensor output: the result is written to |data|, which holds |capacity| elements.
dycl_value_t dycl_value_output(void* data, iree_host_size_t capacity);
dycl_value_t dycl_value_int(int64_t value);
dycl_value_t dycl_value_float(float value);
dycl_value_t dycl_value_bool(bool value);

// Whether a model's device caches the buffers a call frees for later calls of the same sizes (IREE's
// caching allocator: at most 64 free buffers and 256 MiB), where IREE's CPU drivers would allocate
// and zero every call's transient buffers anew. Only for a device the model creates on
// "local-sync" or "local-task"; a shared device (|device| in the options) keeps its allocator.
typedef enum dycl_buffer_reuse_e {
  DYCL_BUFFER_REUSE_AS_SIGNATURE = 0,  // the signature's |reuse_buffers| (the default)
  DYCL_BUFFER_REUSE_NEVER = 1,
  DYCL_BUFFER_REUSE_ALWAYS = 2,
} dycl_buffer_reuse_t;

typedef struct dycl_model_options_t {
  // The IREE device to run on: "local-sync" (default: runs on the calling thread), "local-task"
  // (a worker pool), "vulkan" (when the runtime was built with DYCL_ENABLE_VULKAN).
  iree_string_view_t device_uri;
  // Optional: an instance to share among models (retained). NULL creates one per model.
  iree_runtime_instance_t* instance;
  // Optional: a device to share among models (retained); needs |instance|. NULL creates one
  // from |device_uri|.
  iree_hal_device_t* device;
  // Allocator for the model and its IREE objects.
  iree_allocator_t host_allocator;
  // Whether the device the model creates reuses transient buffers between calls.
  dycl_buffer_reuse_t reuse_buffers;
} dycl_model_options_t;

// Sets |out_options| to the defaults: local-sync, a new instance and device, the system allocator,
// transient buffers reused as the signature says.
void dycl_model_options_initialize(dycl_model_options_t* out_options);

// A loaded bundle, ready to be called.
typedef struct dycl_model_t dycl_model_t;

// Loads a vmfb held in memory (e.g. embedded with iree-c-embed-data). |vmfb| is borrowed and
// must stay valid and unchanged until the model is released; it must be 16-byte aligned. Fails
// with IREE_STATUS_NOT_FOUND when the vmfb has no `<module_name>.main` (another model's bundle),
// IREE_STATUS_FAILED_PRECONDITION when its `main` takes or returns other kinds of values than
// |signature| says (code generated from another export) or uses another calling convention
// (main_abi: both are named), and with IREE's message when the vmfb is corrupt or built for
// another CPU.
iree_status_t dycl_model_create_from_memory(const dycl_model_options_t* options,
                                            const dycl_signature_t* signature,
                                            iree_const_byte_span_t vmfb,
                                            dycl_model_t** out_model);

// Loads a vmfb from a file (memory-mapped where the platform allows).
iree_status_t dycl_model_create_from_file(const dycl_model_options_t* options,
                                          const dycl_signature_t* signature,
                                          const char* vmfb_path, dycl_model_t** out_model);

// Releases |model| and what it owns; NULL is allowed.
void dycl_model_release(dycl_model_t* model);

// The signature the model was created with.
const dycl_signature_t* dycl_model_signature(const dycl_model_t* model);

// The model's instance and device (borrowed), e.g. to share them with another model through
// dycl_model_options_t.
iree_runtime_instance_t* dycl_model_instance(const dycl_model_t* model);
iree_hal_device_t* dycl_model_device(const dycl_model_t* model);

// Checks |inputs| against the signature without running anything: kinds, ranks, static sizes,
// dynamic sizes (non-negative), non-NULL data; and |outputs| (when not NULL): kinds, non-NULL
// data and enough capacity for outputs whose size is static.
iree_status_t dycl_model_check(const dycl_model_t* model, const dycl_value_t* inputs,
                               const dycl_value_t* outputs);

// Calls `main`: checks (as dycl_model_check) before any device work, runs the network, and
// writes each result into |outputs| (signature.output_count values, whose |kind|, |data| and
// |capacity| the caller sets; the call sets the shapes and scalars). A result with more elements
// than its capacity fails with IREE_STATUS_RESOURCE_EXHAUSTED and leaves that output's data
// unwritten.
iree_status_t dycl_model_call(dycl_model_t* model, const dycl_value_t* inputs,
                              dycl_value_t* outputs);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // DYCL_RUNTIME_H_
