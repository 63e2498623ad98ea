// dycl_runtime: see dycl_runtime.h for the API, ownership and thread-safety.

#include "dycl_runtime.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "iree/hal/utils/caching_allocator.h"
#include "iree/modules/hal/types.h"

struct dycl_model_t {
  iree_allocator_t host_allocator;
  const dycl_signature_t* signature;
  iree_runtime_instance_t* instance;
  iree_hal_device_t* device;
  iree_runtime_session_t* session;
  iree_vm_function_t main_function;
  // Reused by every call (cleared, not freed), so a call allocates only the input buffers.
  iree_vm_list_t* input_list;
  iree_vm_list_t* output_list;
};

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

iree_host_size_t dycl_dtype_size(dycl_dtype_t dtype) {
  switch (dtype) {
    case DYCL_DTYPE_FLOAT64:
    case DYCL_DTYPE_INT64:
      return 8;
    case DYCL_DTYPE_FLOAT32:
    case DYCL_DTYPE_INT32:
      return 4;
    case DYCL_DTYPE_FLOAT16:
    case DYCL_DTYPE_INT16:
      return 2;
    case DYCL_DTYPE_INT8:
    case DYCL_DTYPE_UINT8:
    case DYCL_DTYPE_BOOL:
      return 1;
  }
  return 0;
}

const char* dycl_dtype_name(dycl_dtype_t dtype) {
  switch (dtype) {
    case DYCL_DTYPE_FLOAT32:
      return "float32";
    case DYCL_DTYPE_FLOAT64:
      return "float64";
    case DYCL_DTYPE_FLOAT16:
      return "float16";
    case DYCL_DTYPE_INT64:
      return "int64";
    case DYCL_DTYPE_INT32:
      return "int32";
    case DYCL_DTYPE_INT16:
      return "int16";
    case DYCL_DTYPE_INT8:
      return "int8";
    case DYCL_DTYPE_UINT8:
      return "uint8";
    case DYCL_DTYPE_BOOL:
      return "bool";
  }
  return "unknown";
}

// The element type an input is uploaded as: what IREE's Python binding uses for the same numpy
// dtype (signed integers), which the torch-input ABI accepts.
static iree_hal_element_type_t dycl_element_type(dycl_dtype_t dtype) {
  switch (dtype) {
    case DYCL_DTYPE_FLOAT32:
      return IREE_HAL_ELEMENT_TYPE_FLOAT_32;
    case DYCL_DTYPE_FLOAT64:
      return IREE_HAL_ELEMENT_TYPE_FLOAT_64;
    case DYCL_DTYPE_FLOAT16:
      return IREE_HAL_ELEMENT_TYPE_FLOAT_16;
    case DYCL_DTYPE_INT64:
      return IREE_HAL_ELEMENT_TYPE_SINT_64;
    case DYCL_DTYPE_INT32:
      return IREE_HAL_ELEMENT_TYPE_SINT_32;
    case DYCL_DTYPE_INT16:
      return IREE_HAL_ELEMENT_TYPE_SINT_16;
    case DYCL_DTYPE_INT8:
      return IREE_HAL_ELEMENT_TYPE_SINT_8;
    case DYCL_DTYPE_UINT8:
      return IREE_HAL_ELEMENT_TYPE_UINT_8;
    case DYCL_DTYPE_BOOL:
      return IREE_HAL_ELEMENT_TYPE_BOOL_8;
  }
  return IREE_HAL_ELEMENT_TYPE_NONE;
}

// Whether a result's element type holds |dtype|'s values: IREE returns integers signless
// (INT_64) where the input was signed (SINT_64), so the width and the float/int/bool class decide.
static bool dycl_element_type_holds(iree_hal_element_type_t element_type, dycl_dtype_t dtype) {
  iree_hal_element_type_t want = dycl_element_type(dtype);
  if (iree_hal_element_bit_count(element_type) != iree_hal_element_bit_count(want)) return false;
  bool is_float = iree_hal_element_numerical_type_is_float(element_type);
  if (is_float != iree_hal_element_numerical_type_is_float(want)) return false;
  bool is_bool = iree_hal_element_numerical_type_is_boolean(element_type);
  return dtype == DYCL_DTYPE_BOOL ? (is_bool || !is_float) : !is_bool;
}

// The dtype of the 0-d tensor a scalar of |kind| travels as through `main` (main_abi 2).
static dycl_dtype_t dycl_scalar_dtype(dycl_kind_t kind) {
  switch (kind) {
    case DYCL_KIND_INT:
      return DYCL_DTYPE_INT64;
    case DYCL_KIND_FLOAT:
      return DYCL_DTYPE_FLOAT32;
    case DYCL_KIND_BOOL:
      return DYCL_DTYPE_BOOL;
    case DYCL_KIND_TENSOR:
      break;
  }
  return DYCL_DTYPE_FLOAT32;
}

// The character IREE's calling convention strings use for a value of |kind| under main_abi 2:
// every value is a buffer view ("0rr_r" is `main(tensor, int) -> (tensor)`).
static char dycl_kind_cconv(dycl_kind_t kind) {
  (void)kind;
  return 'r';
}

// The same under main_abi 1 (bundles of dycl_iree before main_abi 2), where scalars were VM
// values: only to name that convention when a vmfb uses it.
static char dycl_kind_cconv_abi1(dycl_kind_t kind) {
  switch (kind) {
    case DYCL_KIND_TENSOR:
      return 'r';
    case DYCL_KIND_INT:
      return 'I';
    case DYCL_KIND_FLOAT:
      return 'f';
    case DYCL_KIND_BOOL:
      return 'i';
  }
  return '?';
}

static const char* dycl_kind_name(dycl_kind_t kind) {
  switch (kind) {
    case DYCL_KIND_TENSOR:
      return "tensor";
    case DYCL_KIND_INT:
      return "int";
    case DYCL_KIND_FLOAT:
      return "float";
    case DYCL_KIND_BOOL:
      return "bool";
  }
  return "unknown";
}

dycl_value_t dycl_value_tensor(const void* data, iree_host_size_t rank, const int64_t* shape) {
  dycl_value_t value;
  memset(&value, 0, sizeof(value));
  value.kind = DYCL_KIND_TENSOR;
  value.tensor.data = (void*)data;  // inputs are only read
  value.tensor.rank = rank;
  for (iree_host_size_t i = 0; i < rank && i < DYCL_MAX_RANK; ++i) value.tensor.shape[i] = shape[i];
  return value;
}

dycl_value_t dycl_value_output(void* data, iree_host_size_t capacity) {
  dycl_value_t value;
  memset(&value, 0, sizeof(value));
  value.kind = DYCL_KIND_TENSOR;
  value.tensor.data = data;
  value.tensor.capacity = capacity;
  return value;
}

dycl_value_t dycl_value_int(int64_t i64) {
  dycl_value_t value;
  memset(&value, 0, sizeof(value));
  value.kind = DYCL_KIND_INT;
  value.i64 = i64;
  return value;
}

dycl_value_t dycl_value_float(float f32) {
  dycl_value_t value;
  memset(&value, 0, sizeof(value));
  value.kind = DYCL_KIND_FLOAT;
  value.f32 = f32;
  return value;
}

dycl_value_t dycl_value_bool(bool boolean) {
  dycl_value_t value;
  memset(&value, 0, sizeof(value));
  value.kind = DYCL_KIND_BOOL;
  value.boolean = boolean;
  return value;
}

//===----------------------------------------------------------------------===//
// Creation
//===----------------------------------------------------------------------===//

void dycl_model_options_initialize(dycl_model_options_t* out_options) {
  memset(out_options, 0, sizeof(*out_options));
  out_options->device_uri = iree_make_cstring_view("local-sync");
  out_options->host_allocator = iree_allocator_system();
}

// Writes "[1, ?, 8]" for a signature's shape.
static void dycl_format_spec_shape(const dycl_value_spec_t* spec, char* buffer, size_t size) {
  size_t used = (size_t)snprintf(buffer, size, "[");
  for (iree_host_size_t i = 0; i < spec->rank && used < size; ++i) {
    const char* separator = i ? ", " : "";
    if (spec->shape[i] == DYCL_DYNAMIC_DIM) {
      used += (size_t)snprintf(buffer + used, size - used, "%s?", separator);
    } else {
      used += (size_t)snprintf(buffer + used, size - used, "%s%" PRId64, separator, spec->shape[i]);
    }
  }
  if (used < size) snprintf(buffer + used, size - used, "]");
}

static void dycl_format_shape(iree_host_size_t rank, const int64_t* shape, char* buffer, size_t size) {
  size_t used = (size_t)snprintf(buffer, size, "[");
  for (iree_host_size_t i = 0; i < rank && used < size; ++i) {
    used += (size_t)snprintf(buffer + used, size - used, "%s%" PRId64, i ? ", " : "", shape[i]);
  }
  if (used < size) snprintf(buffer + used, size - used, "]");
}

static iree_status_t dycl_check_signature(const dycl_signature_t* signature) {
  if (!signature || !signature->module_name) {
    return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "a model needs a signature with a module name");
  }
  if (signature->main_abi != DYCL_MAIN_ABI) {
    return iree_make_status(IREE_STATUS_FAILED_PRECONDITION,
                            "%s: the signature was generated for main_abi %d, but this runtime passes main_abi %d; "
                            "generate the code again with the dycl_iree that exported the bundle",
                            signature->model, signature->main_abi, DYCL_MAIN_ABI);
  }
  for (iree_host_size_t i = 0; i < signature->input_count + signature->output_count; ++i) {
    bool is_input = i < signature->input_count;
    const dycl_value_spec_t* spec =
        is_input ? &signature->inputs[i] : &signature->outputs[i - signature->input_count];
    if (spec->kind == DYCL_KIND_TENSOR && spec->rank > DYCL_MAX_RANK) {
      return iree_make_status(IREE_STATUS_UNIMPLEMENTED, "%s: %s '%s' has rank %" PRIhsz ", more than DYCL_MAX_RANK (%d)",
                              signature->model, is_input ? "input" : "output", spec->name, spec->rank,
                              DYCL_MAX_RANK);
    }
  }
  return iree_ok_status();
}

// The calling convention string of `main` for |signature|, each value's character given by |cconv|.
static iree_host_size_t dycl_format_cconv(const dycl_signature_t* signature, char (*cconv)(dycl_kind_t),
                                          char* out) {
  iree_host_size_t length = 0;
  out[length++] = '0';
  for (iree_host_size_t i = 0; i < signature->input_count; ++i) out[length++] = cconv(signature->inputs[i].kind);
  if (signature->input_count == 0) out[length++] = 'v';
  out[length++] = '_';
  for (iree_host_size_t i = 0; i < signature->output_count; ++i) out[length++] = cconv(signature->outputs[i].kind);
  if (signature->output_count == 0) out[length++] = 'v';
  return length;
}

// Checks that the vmfb's `main` takes and returns what the signature says: a header generated
// from another bundle (or another export of the same model), or a vmfb whose `main` uses another
// calling convention (main_abi), is refused at load time.
static iree_status_t dycl_check_calling_convention(const dycl_model_t* model) {
  const dycl_signature_t* signature = model->signature;
  char expected[2 * 64 + 4], abi1[2 * 64 + 4];
  iree_host_size_t count = signature->input_count + signature->output_count;
  if (count > 2 * 64) {
    return iree_make_status(IREE_STATUS_UNIMPLEMENTED, "%s: more than 128 inputs and outputs", signature->model);
  }
  iree_host_size_t length = dycl_format_cconv(signature, dycl_kind_cconv, expected);
  iree_host_size_t abi1_length = dycl_format_cconv(signature, dycl_kind_cconv_abi1, abi1);
  iree_string_view_t actual = iree_vm_function_signature(&model->main_function).calling_convention;
  if (!iree_string_view_equal(actual, iree_make_string_view(expected, length)) &&
      iree_string_view_equal(actual, iree_make_string_view(abi1, abi1_length))) {
    return iree_make_status(IREE_STATUS_FAILED_PRECONDITION,
                            "%s: the vmfb's %s.main takes scalars as VM values (calling convention '%.*s': main_abi 1, "
                            "a bundle exported before main_abi 2), but this runtime passes main_abi %d (scalars as "
                            "0-d tensors, '%.*s'); re-export the bundle with this dycl_iree version",
                            signature->model, signature->module_name, (int)actual.size, actual.data, DYCL_MAIN_ABI,
                            (int)length, expected);
  }
  if (!iree_string_view_equal(actual, iree_make_string_view(expected, length))) {
    return iree_make_status(IREE_STATUS_FAILED_PRECONDITION,
                            "%s: the vmfb's %s.main has calling convention '%.*s' but the signature expects '%.*s' "
                            "(code generated from another bundle?)",
                            signature->model, signature->module_name, (int)actual.size, actual.data, (int)length,
                            expected);
  }
  return iree_ok_status();
}

// Whether a device the model creates from |options| caches the buffers calls free (dycl_buffer_reuse_t).
static bool dycl_reuses_buffers(const dycl_model_options_t* options, const dycl_signature_t* signature) {
  iree_string_view_t driver = iree_string_view_empty(), rest = iree_string_view_empty();
  iree_string_view_split(options->device_uri, ':', &driver, &rest);
  if (!iree_string_view_equal(driver, IREE_SV("local-sync")) && !iree_string_view_equal(driver, IREE_SV("local-task"))) {
    return false;
  }
  if (options->reuse_buffers == DYCL_BUFFER_REUSE_AS_SIGNATURE) return signature->reuse_buffers;
  return options->reuse_buffers == DYCL_BUFFER_REUSE_ALWAYS;
}

// Puts IREE's caching allocator over |device|'s own, before anything is allocated from it. A cached
// buffer returns to the caching allocator through a pointer that does not hold it, so every buffer
// must be released before the device: dycl_model_release releases its lists and session first. The
// pools are those of the Python runtime (`host_runtime.runner._BUFFER_CACHE`).
static iree_status_t dycl_use_buffer_cache(iree_hal_device_t* device, iree_allocator_t host_allocator) {
  iree_hal_allocator_t* caching = NULL;
  IREE_RETURN_IF_ERROR(iree_hal_caching_allocator_create_from_spec(IREE_SV("*=*;256mib;64"),
                                                                   iree_hal_device_allocator(device),
                                                                   host_allocator, &caching));
  iree_hal_device_replace_allocator(device, caching);
  iree_hal_allocator_release(caching);
  return iree_ok_status();
}

// Creates everything up to an empty session; the caller appends the module.
static iree_status_t dycl_model_allocate(const dycl_model_options_t* options, const dycl_signature_t* signature,
                                         dycl_model_t** out_model) {
  *out_model = NULL;
  dycl_model_options_t defaults;
  if (!options) {
    dycl_model_options_initialize(&defaults);
    options = &defaults;
  }
  IREE_RETURN_IF_ERROR(dycl_check_signature(signature));
  if (options->device && !options->instance) {
    return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "a shared device needs the instance it was created from");
  }
  dycl_model_t* model = NULL;
  IREE_RETURN_IF_ERROR(iree_allocator_malloc(options->host_allocator, sizeof(*model), (void**)&model));
  memset(model, 0, sizeof(*model));
  model->host_allocator = options->host_allocator;
  model->signature = signature;

  iree_status_t status = iree_ok_status();
  if (options->instance) {
    model->instance = options->instance;
    iree_runtime_instance_retain(model->instance);
  } else {
    iree_runtime_instance_options_t instance_options;
    iree_runtime_instance_options_initialize(&instance_options);
    iree_runtime_instance_options_use_all_available_drivers(&instance_options);
    status = iree_runtime_instance_create(&instance_options, options->host_allocator, &model->instance);
  }
  if (iree_status_is_ok(status)) {
    if (options->device) {
      model->device = options->device;
      iree_hal_device_retain(model->device);
    } else {
      status = iree_runtime_instance_try_create_default_device(model->instance, options->device_uri, &model->device);
      if (iree_status_is_ok(status) && dycl_reuses_buffers(options, signature)) {
        status = dycl_use_buffer_cache(model->device, options->host_allocator);
      }
      if (!iree_status_is_ok(status)) {
        status = iree_status_annotate_f(status, "creating device '%.*s'", (int)options->device_uri.size,
                                        options->device_uri.data);
      }
    }
  }
  if (iree_status_is_ok(status)) {
    iree_runtime_session_options_t session_options;
    iree_runtime_session_options_initialize(&session_options);
    status = iree_runtime_session_create_with_device(model->instance, &session_options, model->device,
                                                     iree_runtime_instance_host_allocator(model->instance),
                                                     &model->session);
  }
  if (iree_status_is_ok(status)) {
    status = iree_vm_list_create(iree_vm_make_undefined_type_def(), signature->input_count, model->host_allocator,
                                 &model->input_list);
  }
  if (iree_status_is_ok(status)) {
    status = iree_vm_list_create(iree_vm_make_undefined_type_def(), signature->output_count, model->host_allocator,
                                 &model->output_list);
  }
  if (iree_status_is_ok(status)) {
    *out_model = model;
  } else {
    dycl_model_release(model);
  }
  return status;
}

// Looks up `main` and checks its types once the module is in the session.
static iree_status_t dycl_model_bind_main(dycl_model_t* model) {
  char name[256];
  int length = snprintf(name, sizeof(name), "%s.main", model->signature->module_name);
  if (length < 0 || (size_t)length >= sizeof(name)) {
    return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "module name too long: %s", model->signature->module_name);
  }
  IREE_RETURN_IF_ERROR(iree_runtime_session_lookup_function(model->session, iree_make_cstring_view(name),
                                                            &model->main_function),
                       "%s: the vmfb has no function %s (not a dycl_iree bundle with a compiled host?)",
                       model->signature->model, name);
  return dycl_check_calling_convention(model);
}

iree_status_t dycl_model_create_from_memory(const dycl_model_options_t* options, const dycl_signature_t* signature,
                                            iree_const_byte_span_t vmfb, dycl_model_t** out_model) {
  IREE_ASSERT_ARGUMENT(out_model);
  dycl_model_t* model = NULL;
  IREE_RETURN_IF_ERROR(dycl_model_allocate(options, signature, &model));
  iree_status_t status =
      iree_runtime_session_append_bytecode_module_from_memory(model->session, vmfb, iree_allocator_null());
  if (!iree_status_is_ok(status)) {
    status = iree_status_annotate_f(status, "%s: loading the embedded vmfb (%" PRIhsz " bytes)", signature->model,
                                    vmfb.data_length);
  }
  if (iree_status_is_ok(status)) status = dycl_model_bind_main(model);
  if (iree_status_is_ok(status)) {
    *out_model = model;
  } else {
    dycl_model_release(model);
  }
  return status;
}

iree_status_t dycl_model_create_from_file(const dycl_model_options_t* options, const dycl_signature_t* signature,
                                          const char* vmfb_path, dycl_model_t** out_model) {
  IREE_ASSERT_ARGUMENT(out_model);
  dycl_model_t* model = NULL;
  IREE_RETURN_IF_ERROR(dycl_model_allocate(options, signature, &model));
  iree_status_t status = iree_runtime_session_append_bytecode_module_from_file(model->session, vmfb_path);
  if (!iree_status_is_ok(status)) {
    status = iree_status_annotate_f(status, "%s: loading %s", signature->model, vmfb_path);
  }
  if (iree_status_is_ok(status)) status = dycl_model_bind_main(model);
  if (iree_status_is_ok(status)) {
    *out_model = model;
  } else {
    dycl_model_release(model);
  }
  return status;
}

void dycl_model_release(dycl_model_t* model) {
  if (!model) return;
  iree_vm_list_release(model->input_list);
  iree_vm_list_release(model->output_list);
  iree_runtime_session_release(model->session);
  iree_hal_device_release(model->device);
  iree_runtime_instance_release(model->instance);
  iree_allocator_free(model->host_allocator, model);
}

const dycl_signature_t* dycl_model_signature(const dycl_model_t* model) { return model->signature; }

iree_runtime_instance_t* dycl_model_instance(const dycl_model_t* model) { return model->instance; }

iree_hal_device_t* dycl_model_device(const dycl_model_t* model) { return model->device; }

//===----------------------------------------------------------------------===//
// Checks
//===----------------------------------------------------------------------===//

// The element count of a shape, failing on negative sizes and overflow.
static iree_status_t dycl_element_count(const char* model, const char* what, const char* name,
                                        iree_host_size_t rank, const int64_t* shape, iree_host_size_t* out_count) {
  iree_host_size_t count = 1;
  for (iree_host_size_t i = 0; i < rank; ++i) {
    if (shape[i] < 0) {
      return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "%s: %s '%s' has negative size %" PRId64 " in dim %" PRIhsz,
                              model, what, name, shape[i], i);
    }
    if (shape[i] != 0 && count > IREE_HOST_SIZE_MAX / (iree_host_size_t)shape[i]) {
      return iree_make_status(IREE_STATUS_OUT_OF_RANGE, "%s: %s '%s' has too many elements", model, what, name);
    }
    count *= (iree_host_size_t)shape[i];
  }
  *out_count = count;
  return iree_ok_status();
}

static iree_status_t dycl_check_input(const dycl_signature_t* signature, iree_host_size_t index,
                                      const dycl_value_t* value) {
  const dycl_value_spec_t* spec = &signature->inputs[index];
  if (value->kind != spec->kind) {
    return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "%s: input %" PRIhsz " ('%s') must be a%s %s, got a%s %s",
                            signature->model, index, spec->name, spec->kind == DYCL_KIND_INT ? "n" : "",
                            dycl_kind_name(spec->kind), value->kind == DYCL_KIND_INT ? "n" : "",
                            dycl_kind_name(value->kind));
  }
  if (spec->kind != DYCL_KIND_TENSOR) return iree_ok_status();
  const dycl_tensor_t* tensor = &value->tensor;
  // The shapes are formatted only for a message: this runs on every call.
  char want[128], have[128];
  if (tensor->rank != spec->rank) {
    dycl_format_spec_shape(spec, want, sizeof(want));
    dycl_format_shape(tensor->rank < DYCL_MAX_RANK ? tensor->rank : DYCL_MAX_RANK, tensor->shape, have, sizeof(have));
    return iree_make_status(IREE_STATUS_INVALID_ARGUMENT,
                            "%s: input %" PRIhsz " ('%s') must have rank %" PRIhsz " (shape %s, got shape %s)",
                            signature->model, index, spec->name, spec->rank, want, have);
  }
  for (iree_host_size_t dim = 0; dim < spec->rank; ++dim) {
    if (spec->shape[dim] != DYCL_DYNAMIC_DIM && spec->shape[dim] != tensor->shape[dim]) {
      dycl_format_spec_shape(spec, want, sizeof(want));
      dycl_format_shape(tensor->rank, tensor->shape, have, sizeof(have));
      return iree_make_status(IREE_STATUS_INVALID_ARGUMENT,
                              "%s: input %" PRIhsz " ('%s') must have size %" PRId64 " in dim %" PRIhsz
                              " (shape %s, got shape %s)",
                              signature->model, index, spec->name, spec->shape[dim], dim, want, have);
    }
  }
  iree_host_size_t count = 0;
  IREE_RETURN_IF_ERROR(dycl_element_count(signature->model, "input", spec->name, tensor->rank, tensor->shape, &count));
  if (count > 0 && !tensor->data) {
    return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "%s: input %" PRIhsz " ('%s') has no data (NULL)",
                            signature->model, index, spec->name);
  }
  return iree_ok_status();
}

static iree_status_t dycl_check_output(const dycl_signature_t* signature, iree_host_size_t index,
                                       const dycl_value_t* value) {
  const dycl_value_spec_t* spec = &signature->outputs[index];
  if (value->kind != spec->kind) {
    return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "%s: output %" PRIhsz " is a%s %s, but a%s %s was passed",
                            signature->model, index, spec->kind == DYCL_KIND_INT ? "n" : "",
                            dycl_kind_name(spec->kind), value->kind == DYCL_KIND_INT ? "n" : "",
                            dycl_kind_name(value->kind));
  }
  if (spec->kind != DYCL_KIND_TENSOR) return iree_ok_status();
  // Outputs whose size is static must fit before anything runs; the others are checked when
  // their size is known.
  bool is_static = true;
  for (iree_host_size_t dim = 0; dim < spec->rank; ++dim) is_static &= spec->shape[dim] != DYCL_DYNAMIC_DIM;
  if (is_static) {
    iree_host_size_t count = 0;
    IREE_RETURN_IF_ERROR(dycl_element_count(signature->model, "output", spec->name, spec->rank, spec->shape, &count));
    if (value->tensor.capacity < count) {
      char want[128];
      dycl_format_spec_shape(spec, want, sizeof(want));
      return iree_make_status(IREE_STATUS_INVALID_ARGUMENT,
                              "%s: output %" PRIhsz " (shape %s) needs room for %" PRIhsz " elements, capacity is %" PRIhsz,
                              signature->model, index, want, count, value->tensor.capacity);
    }
  }
  if (value->tensor.capacity > 0 && !value->tensor.data) {
    return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "%s: output %" PRIhsz " has no buffer (NULL)",
                            signature->model, index);
  }
  return iree_ok_status();
}

iree_status_t dycl_model_check(const dycl_model_t* model, const dycl_value_t* inputs, const dycl_value_t* outputs) {
  const dycl_signature_t* signature = model->signature;
  if (signature->input_count > 0 && !inputs) {
    return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "%s takes %" PRIhsz " inputs, got none (NULL)",
                            signature->model, signature->input_count);
  }
  for (iree_host_size_t i = 0; i < signature->input_count; ++i) {
    IREE_RETURN_IF_ERROR(dycl_check_input(signature, i, &inputs[i]));
  }
  if (!outputs) return iree_ok_status();
  for (iree_host_size_t i = 0; i < signature->output_count; ++i) {
    IREE_RETURN_IF_ERROR(dycl_check_output(signature, i, &outputs[i]));
  }
  return iree_ok_status();
}

//===----------------------------------------------------------------------===//
// Calls
//===----------------------------------------------------------------------===//

// Uploads |data| (dense, |rank| dims of |dtype|) into a device buffer and appends it to the inputs.
static iree_status_t dycl_push_buffer(dycl_model_t* model, dycl_dtype_t dtype, iree_host_size_t rank,
                                      const int64_t* dims, const void* data) {
  iree_hal_dim_t shape[DYCL_MAX_RANK];
  iree_host_size_t count = 1;
  for (iree_host_size_t i = 0; i < rank; ++i) {
    shape[i] = (iree_hal_dim_t)dims[i];
    count *= (iree_host_size_t)dims[i];
  }
  iree_hal_buffer_params_t params = {
      .usage = IREE_HAL_BUFFER_USAGE_DEFAULT,
      .access = IREE_HAL_MEMORY_ACCESS_ALL,
      .type = IREE_HAL_MEMORY_TYPE_DEVICE_LOCAL,
  };
  iree_hal_buffer_view_t* view = NULL;
  IREE_RETURN_IF_ERROR(iree_hal_buffer_view_allocate_buffer_copy(
      model->device, iree_hal_device_allocator(model->device), rank, shape, dycl_element_type(dtype),
      IREE_HAL_ENCODING_TYPE_DENSE_ROW_MAJOR, params, iree_make_const_byte_span(data, count * dycl_dtype_size(dtype)),
      &view));
  iree_vm_ref_t ref = iree_hal_buffer_view_move_ref(view);
  return iree_vm_list_push_ref_move(model->input_list, &ref);
}

// Appends one input as `main` takes it (main_abi 2): a tensor as a buffer view of its elements, an
// int, float or bool as a 0-d int64, float32 or bool (one byte) buffer view.
static iree_status_t dycl_push_input(dycl_model_t* model, const dycl_value_spec_t* spec, const dycl_value_t* value) {
  uint8_t boolean = value->boolean ? 1 : 0;
  switch (spec->kind) {
    case DYCL_KIND_INT:
      return dycl_push_buffer(model, DYCL_DTYPE_INT64, 0, NULL, &value->i64);
    case DYCL_KIND_FLOAT:
      return dycl_push_buffer(model, DYCL_DTYPE_FLOAT32, 0, NULL, &value->f32);
    case DYCL_KIND_BOOL:
      return dycl_push_buffer(model, DYCL_DTYPE_BOOL, 0, NULL, &boolean);
    case DYCL_KIND_TENSOR:
      break;
  }
  return dycl_push_buffer(model, spec->dtype, value->tensor.rank, value->tensor.shape, value->tensor.data);
}

// Copies a result's elements into the caller's buffer, from mapped memory where the device
// allows (CPU drivers) and through a device transfer otherwise (Vulkan's device-local memory).
static iree_status_t dycl_read_buffer(dycl_model_t* model, iree_hal_buffer_t* buffer, void* target,
                                      iree_device_size_t length) {
  if (length == 0) return iree_ok_status();
  if (iree_all_bits_set(iree_hal_buffer_memory_type(buffer), IREE_HAL_MEMORY_TYPE_HOST_VISIBLE) &&
      iree_all_bits_set(iree_hal_buffer_allowed_usage(buffer), IREE_HAL_BUFFER_USAGE_MAPPING_SCOPED)) {
    return iree_hal_buffer_map_read(buffer, 0, target, length);
  }
  return iree_hal_device_transfer_d2h(model->device, buffer, 0, target, length, IREE_HAL_TRANSFER_BUFFER_FLAG_DEFAULT,
                                      iree_infinite_timeout());
}

static iree_status_t dycl_pop_output(dycl_model_t* model, iree_host_size_t index, dycl_value_t* value) {
  const dycl_signature_t* signature = model->signature;
  const dycl_value_spec_t* spec = &signature->outputs[index];
  iree_hal_buffer_view_t* view = iree_vm_list_get_buffer_view_assign(model->output_list, index);
  if (!view) {
    return iree_make_status(IREE_STATUS_INTERNAL, "%s: output %" PRIhsz " is not a buffer view", signature->model,
                            index);
  }
  // A scalar comes back as a 0-d tensor (main_abi 2).
  bool is_scalar = spec->kind != DYCL_KIND_TENSOR;
  dycl_dtype_t dtype = is_scalar ? dycl_scalar_dtype(spec->kind) : spec->dtype;
  iree_host_size_t want_rank = is_scalar ? 0 : spec->rank;
  iree_host_size_t rank = iree_hal_buffer_view_shape_rank(view);
  iree_hal_element_type_t element_type = iree_hal_buffer_view_element_type(view);
  if (rank != want_rank || !dycl_element_type_holds(element_type, dtype)) {
    return iree_make_status(IREE_STATUS_INTERNAL,
                            "%s: output %" PRIhsz " came back with rank %" PRIhsz " and element type 0x%08x, "
                            "the signature says rank %" PRIhsz " %s",
                            signature->model, index, rank, (unsigned)element_type, want_rank, dycl_dtype_name(dtype));
  }
  if (is_scalar) {
    uint8_t boolean = 0;
    void* target = spec->kind == DYCL_KIND_INT ? (void*)&value->i64
                   : spec->kind == DYCL_KIND_FLOAT ? (void*)&value->f32
                                                   : (void*)&boolean;
    IREE_RETURN_IF_ERROR(dycl_read_buffer(model, iree_hal_buffer_view_buffer(view), target, dycl_dtype_size(dtype)));
    if (spec->kind == DYCL_KIND_BOOL) value->boolean = boolean != 0;
    return iree_ok_status();
  }
  iree_host_size_t count = 1;
  for (iree_host_size_t i = 0; i < rank; ++i) {
    value->tensor.shape[i] = (int64_t)iree_hal_buffer_view_shape_dim(view, i);
    count *= (iree_host_size_t)value->tensor.shape[i];
  }
  value->tensor.rank = rank;
  if (count > value->tensor.capacity) {
    char have[128];
    dycl_format_shape(rank, value->tensor.shape, have, sizeof(have));
    return iree_make_status(IREE_STATUS_RESOURCE_EXHAUSTED,
                            "%s: output %" PRIhsz " has shape %s (%" PRIhsz " elements) but its buffer holds %" PRIhsz,
                            signature->model, index, have, count, value->tensor.capacity);
  }
  iree_device_size_t length = (iree_device_size_t)(count * dycl_dtype_size(spec->dtype));
  return dycl_read_buffer(model, iree_hal_buffer_view_buffer(view), value->tensor.data, length);
}

iree_status_t dycl_model_call(dycl_model_t* model, const dycl_value_t* inputs, dycl_value_t* outputs) {
  const dycl_signature_t* signature = model->signature;
  if (signature->output_count > 0 && !outputs) {
    return iree_make_status(IREE_STATUS_INVALID_ARGUMENT, "%s returns %" PRIhsz " outputs, got no output array (NULL)",
                            signature->model, signature->output_count);
  }
  IREE_RETURN_IF_ERROR(dycl_model_check(model, inputs, outputs));

  iree_vm_list_clear(model->input_list);
  iree_vm_list_clear(model->output_list);
  iree_status_t status = iree_ok_status();
  for (iree_host_size_t i = 0; i < signature->input_count && iree_status_is_ok(status); ++i) {
    status = dycl_push_input(model, &signature->inputs[i], &inputs[i]);
  }
  if (iree_status_is_ok(status)) {
    status = iree_runtime_session_call(model->session, &model->main_function, model->input_list, model->output_list);
  }
  if (iree_status_is_ok(status) && iree_vm_list_size(model->output_list) != signature->output_count) {
    status = iree_make_status(IREE_STATUS_INTERNAL, "%s: main returned %" PRIhsz " values, the signature says %" PRIhsz,
                              signature->model, iree_vm_list_size(model->output_list), signature->output_count);
  }
  for (iree_host_size_t i = 0; i < signature->output_count && iree_status_is_ok(status); ++i) {
    status = dycl_pop_output(model, i, &outputs[i]);
  }
  // Drop the buffers now rather than at the next call: the caller has its copies.
  iree_vm_list_clear(model->input_list);
  iree_vm_list_clear(model->output_list);
  return status;
}
