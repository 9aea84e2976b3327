/*
 * A narrow C face over UCX's UCP API for the `ucx` route of
 * mooncake-transfer (transfer/src/ucx/). Rust sees only this file's
 * functions and plain integers and pointers: UCP's parameter structs, their
 * field masks and its status pointers stay on the C side, where the
 * compiler checks them against the installed headers.
 *
 * Every function here is called from one thread, the route's worker thread
 * (transfer/src/ucx/worker.rs), except mc_ucx_signal, which UCP documents
 * as safe from any thread. Returned integers are UCS status codes
 * (0 = UCS_OK, negative = error), except where a comment says otherwise.
 */
/* open_memstream */
#define _POSIX_C_SOURCE 200809L

#include <poll.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

/* One worker with its context. */
typedef struct mc_ucx {
    ucp_context_h context;
    ucp_worker_h worker;
    int efd;
} mc_ucx_t;

/* One operation's completion, owned by Rust (repr(C) twin in ffi.rs):
 * done becomes 1 once status is final. */
typedef struct mc_op {
    volatile int32_t done;
    int32_t status;
} mc_op_t;

/* One endpoint, with the failure its error handler saw (0: none). */
typedef struct mc_ep {
    ucp_ep_h ep;
    volatile int32_t failed;
} mc_ep_t;

const char *mc_ucx_status_string(int32_t status) {
    return ucs_status_string((ucs_status_t)status);
}

void mc_ucx_version(unsigned *major, unsigned *minor, unsigned *release) {
    ucp_get_version(major, minor, release);
}

int32_t mc_ucx_new(mc_ucx_t **out) {
    ucp_config_t *config = NULL;
    ucs_status_t status = ucp_config_read(NULL, NULL, &config);
    if (status != UCS_OK) {
        return status;
    }
    ucp_params_t params;
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    mc_ucx_t *ucx = calloc(1, sizeof(*ucx));
    if (ucx == NULL) {
        ucp_config_release(config);
        return UCS_ERR_NO_MEMORY;
    }
    status = ucp_init(&params, config, &ucx->context);
    ucp_config_release(config);
    if (status != UCS_OK) {
        free(ucx);
        return status;
    }
    ucp_worker_params_t wparams;
    memset(&wparams, 0, sizeof(wparams));
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    status = ucp_worker_create(ucx->context, &wparams, &ucx->worker);
    if (status != UCS_OK) {
        ucp_cleanup(ucx->context);
        free(ucx);
        return status;
    }
    status = ucp_worker_get_efd(ucx->worker, &ucx->efd);
    if (status != UCS_OK) {
        ucp_worker_destroy(ucx->worker);
        ucp_cleanup(ucx->context);
        free(ucx);
        return status;
    }
    *out = ucx;
    return UCS_OK;
}

/* Destroys the worker: no peer is served and no operation completes after
 * this. Mappings stay until mc_ucx_free's caller unmaps them. */
void mc_ucx_worker_destroy(mc_ucx_t *ucx) {
    ucp_worker_destroy(ucx->worker);
    ucx->worker = NULL;
}

/* Frees the context (after mc_ucx_worker_destroy and every unmap). */
void mc_ucx_free(mc_ucx_t *ucx) {
    if (ucx->worker != NULL) {
        ucp_worker_destroy(ucx->worker);
    }
    ucp_cleanup(ucx->context);
    free(ucx);
}

/* The worker's address, copied into a malloc'd buffer the caller frees
 * with mc_ucx_free_buf. */
int32_t mc_ucx_address(mc_ucx_t *ucx, void **buf, size_t *len) {
    ucp_address_t *address = NULL;
    size_t length = 0;
    ucs_status_t status = ucp_worker_get_address(ucx->worker, &address, &length);
    if (status != UCS_OK) {
        return status;
    }
    void *copy = malloc(length);
    if (copy == NULL) {
        ucp_worker_release_address(ucx->worker, address);
        return UCS_ERR_NO_MEMORY;
    }
    memcpy(copy, address, length);
    ucp_worker_release_address(ucx->worker, address);
    *buf = copy;
    *len = length;
    return UCS_OK;
}

void mc_ucx_free_buf(void *buf) { free(buf); }

/* What ucp_context_print_info says of the context (its memory domains and
 * transport resources, one "# resource N : md M dev D flags -- tl/dev"
 * line each), as a NUL-terminated text in *buf (free with
 * mc_ucx_free_buf). */
int32_t mc_ucx_context_info(mc_ucx_t *ucx, char **buf, size_t *len) {
    char *text = NULL;
    size_t length = 0;
    FILE *stream = open_memstream(&text, &length);
    if (stream == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    ucp_context_print_info(ucx->context, stream);
    if (fclose(stream) != 0) {
        free(text);
        return UCS_ERR_IO_ERROR;
    }
    *buf = text;
    *len = length;
    return UCS_OK;
}

/* Maps [addr, addr + len) for remote access, asking for remote reads only
 * when remote_write is 0. UCX 1.13 registers with full remote access
 * whatever `prot` says (docs/SECURITY.md); later versions may honour it. */
int32_t mc_ucx_map(mc_ucx_t *ucx, void *addr, size_t len, int32_t remote_write, void **memh) {
    ucp_mem_map_params_t params;
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                        UCP_MEM_MAP_PARAM_FIELD_PROT;
    params.address = addr;
    params.length = len;
    params.prot = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE | UCP_MEM_MAP_PROT_REMOTE_READ;
    if (remote_write) {
        params.prot |= UCP_MEM_MAP_PROT_REMOTE_WRITE;
    }
    return ucp_mem_map(ucx->context, &params, (ucp_mem_h *)memh);
}

int32_t mc_ucx_unmap(mc_ucx_t *ucx, void *memh) { return ucp_mem_unmap(ucx->context, (ucp_mem_h)memh); }

/* The memory type UCX sees behind a mapping (ucs_memory_type_t: 0 host,
 * 1 cuda, 2 cuda managed, ...), or a negative status. */
int32_t mc_ucx_mem_type(void *memh) {
    ucp_mem_attr_t attr;
    memset(&attr, 0, sizeof(attr));
    attr.field_mask = UCP_MEM_ATTR_FIELD_MEM_TYPE;
    ucs_status_t status = ucp_mem_query((ucp_mem_h)memh, &attr);
    if (status != UCS_OK) {
        return status;
    }
    return (int32_t)attr.mem_type;
}

/* Packs the remote key of a mapping into a malloc'd buffer (freed with
 * mc_ucx_free_buf). */
int32_t mc_ucx_rkey_pack(mc_ucx_t *ucx, void *memh, void **buf, size_t *len) {
    void *packed = NULL;
    size_t length = 0;
    ucs_status_t status = ucp_rkey_pack(ucx->context, (ucp_mem_h)memh, &packed, &length);
    if (status != UCS_OK) {
        return status;
    }
    void *copy = malloc(length);
    if (copy == NULL) {
        ucp_rkey_buffer_release(packed);
        return UCS_ERR_NO_MEMORY;
    }
    memcpy(copy, packed, length);
    ucp_rkey_buffer_release(packed);
    *buf = copy;
    *len = length;
    return UCS_OK;
}

static void mc_ep_failed(void *arg, ucp_ep_h ep, ucs_status_t status) {
    (void)ep;
    mc_ep_t *mc = arg;
    mc->failed = status == UCS_OK ? UCS_ERR_CONNECTION_RESET : status;
}

/* An endpoint to the worker whose address is [addr, addr + len). With
 * peer_errors, peer failures are reported (ops fail, mc_ucx_ep_failed says
 * why); UCX 1.13's shared-memory transports cannot do that, and refuse such
 * an endpoint as unreachable. */
int32_t mc_ucx_ep_new(mc_ucx_t *ucx, const void *addr, int32_t peer_errors, mc_ep_t **out) {
    mc_ep_t *mc = calloc(1, sizeof(*mc));
    if (mc == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    ucp_ep_params_t params;
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = (const ucp_address_t *)addr;
    params.err_mode = peer_errors ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    params.err_handler.cb = mc_ep_failed;
    params.err_handler.arg = mc;
    ucs_status_t status = ucp_ep_create(ucx->worker, &params, &mc->ep);
    if (status != UCS_OK) {
        free(mc);
        return status;
    }
    *out = mc;
    return UCS_OK;
}

int32_t mc_ucx_ep_failed(const mc_ep_t *ep) { return ep->failed; }

/* Closes an endpoint made with peer_errors, with force (UCP refuses a
 * forced close of any other): outstanding operations on it complete with an
 * error, some only during later progress. Returns 0 once the close is under
 * way, or the failed close's status. Either way the wrapper `ep` stays
 * valid (its error handler's argument) until mc_ucx_ep_free, after the
 * worker is destroyed. */
int32_t mc_ucx_ep_close(mc_ucx_t *ucx, mc_ep_t *ep) {
    ucp_request_param_t param;
    memset(&param, 0, sizeof(param));
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t request = ucp_ep_close_nbx(ep->ep, &param);
    if (UCS_PTR_IS_ERR(request)) {
        return UCS_PTR_STATUS(request);
    }
    if (request != NULL) {
        while (ucp_request_check_status(request) == UCS_INPROGRESS) {
            ucp_worker_progress(ucx->worker);
        }
        ucp_request_free(request);
    }
    return UCS_OK;
}

/* Frees an endpoint's wrapper once its worker is destroyed (which destroyed
 * the endpoint itself). */
void mc_ucx_ep_free(mc_ep_t *ep) { free(ep); }

int32_t mc_ucx_rkey_unpack(mc_ep_t *ep, const void *buf, void **rkey) {
    return ucp_ep_rkey_unpack(ep->ep, buf, (ucp_rkey_h *)rkey);
}

void mc_ucx_rkey_destroy(void *rkey) { ucp_rkey_destroy((ucp_rkey_h)rkey); }

static void mc_op_done(void *request, ucs_status_t status, void *user_data) {
    mc_op_t *op = user_data;
    op->status = status;
    __atomic_store_n(&op->done, 1, __ATOMIC_RELEASE);
    ucp_request_free(request);
}

/* Issues one operation; `op` is completed now (returns 0 with op->done
 * set) or later from mc_ucx_progress (returns 1), or the call failed
 * (negative status, op untouched). */
static int32_t mc_issue(ucs_status_ptr_t request, mc_op_t *op) {
    if (request == NULL) {
        op->status = UCS_OK;
        __atomic_store_n(&op->done, 1, __ATOMIC_RELEASE);
        return 0;
    }
    if (UCS_PTR_IS_ERR(request)) {
        return UCS_PTR_STATUS(request);
    }
    return 1;
}

static void mc_param(ucp_request_param_t *param, mc_op_t *op, void *memh) {
    memset(param, 0, sizeof(*param));
    param->op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param->cb.send = mc_op_done;
    param->user_data = op;
    if (memh != NULL) {
        param->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        param->memh = (ucp_mem_h)memh;
    }
}

/* Reads [remote, remote + len) of the peer's mapping into local. */
int32_t mc_ucx_get(mc_ep_t *ep, void *local, size_t len, uint64_t remote, void *rkey, void *memh, mc_op_t *op) {
    ucp_request_param_t param;
    mc_param(&param, op, memh);
    return mc_issue(ucp_get_nbx(ep->ep, local, len, remote, (ucp_rkey_h)rkey, &param), op);
}

/* Progresses the worker until it has nothing left to do, or for at most
 * `rounds` rounds (so queued commands are not starved under load); how
 * many events it handled. */
unsigned mc_ucx_progress(mc_ucx_t *ucx, unsigned rounds) {
    unsigned total = 0;
    unsigned events;
    while (rounds-- > 0 && (events = ucp_worker_progress(ucx->worker)) != 0) {
        total += events;
    }
    return total;
}

/* Sleeps until the worker has an event, mc_ucx_signal is called, or
 * timeout_ms passes. Returns 0 (woken or timed out) or a negative status. */
int32_t mc_ucx_wait(mc_ucx_t *ucx, int32_t timeout_ms) {
    ucs_status_t status = ucp_worker_arm(ucx->worker);
    if (status == UCS_ERR_BUSY) {
        return 0;
    }
    if (status != UCS_OK) {
        return status;
    }
    struct pollfd pfd = {.fd = ucx->efd, .events = POLLIN, .revents = 0};
    (void)poll(&pfd, 1, timeout_ms);
    return 0;
}

int32_t mc_ucx_signal(mc_ucx_t *ucx) { return ucp_worker_signal(ucx->worker); }
