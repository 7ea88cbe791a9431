/* bpfdsl.runtime._xsk: one step of xdpsock's l2fwd over an AF_XDP socket's rings, in C
 * (issue #25).
 *
 * bpfdsl/runtime/xsk.py (XskSocket.l2fwd, the only caller) runs the same step in Python;
 * this is that step without the Python per batch: the rings are the socket's mmaps,
 * passed as writable buffers, and the byte offsets of each ring's producer index,
 * consumer index and descriptor array are the kernel's (getsockopt XDP_MMAP_OFFSETS,
 * read by xsk.py).  Built only with BPFDSL_COMPILE=1 (setup.py).
 *
 * l2fwd(fd, umem, rx, fr, tx, cr, offsets, size, limit) -> (put, completed)
 *
 *   fd       the AF_XDP socket (kicked with sendto(fd, NULL, 0, MSG_DONTWAIT))
 *   umem     the UMEM (writable): the MAC addresses of each frame are swapped in place
 *   rx..cr   the RX, fill, TX and completion ring mmaps (writable)
 *   offsets  12 ints: (producer, consumer, descriptors) byte offsets of rx, fr, tx, cr
 *   size     descriptors per ring (a power of two: XskSocket's `frames`)
 *   limit    at most this many frames are taken off the RX ring
 *
 * The step, as XskSocket.l2fwd (socket without a TX pool: every chunk that completes
 * goes back to the fill ring): reap the completion ring onto the fill ring; take up to
 * `limit` frames off RX; swap bytes 0-5 and 6-11 of each; put as many as the TX ring has
 * room for on it (the rest go back to the fill ring, as xdpsock drops them); kick until
 * the kernel took the TX ring (at most 64 kicks: copy mode sends 32 per call); reap the
 * completion ring again.  Ring indexes are read with acquire and written with release
 * ordering (libxdp's xsk_ring_*: smp_load_acquire / smp_store_release).  Returns the
 * frames put on the TX ring and the sends completed; raises OSError when a kick fails
 * other than "busy, try later" (ENOBUFS, EAGAIN, EBUSY, ENETDOWN, EINTR, as xdpsock).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

struct ring {
    uint8_t *base;
    Py_ssize_t len;
    uint32_t *prod, *cons;
    uint8_t *desc;
};

static int ring_at(Py_buffer *b, int prod, int cons, int desc, Py_ssize_t desc_bytes,
                   struct ring *r) {
    if (prod < 0 || cons < 0 || desc < 0 || prod + 4 > b->len || cons + 4 > b->len ||
        desc + desc_bytes > b->len || prod % 4 || cons % 4 || desc % 8) {
        PyErr_SetString(PyExc_ValueError, "ring offsets outside the ring's mapping");
        return -1;
    }
    r->base = b->buf;
    r->len = b->len;
    r->prod = (uint32_t *)(r->base + prod);
    r->cons = (uint32_t *)(r->base + cons);
    r->desc = r->base + desc;
    return 0;
}

static inline uint32_t load_acq(uint32_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void store_rel(uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

/* completion ring -> fill ring; returns how many */
static uint32_t reap(struct ring *cr, struct ring *fr, uint32_t mask) {
    uint32_t cons = *cr->cons, n = load_acq(cr->prod) - cons;
    if (!n)
        return 0;
    uint32_t fprod = *fr->prod;
    uint64_t *cd = (uint64_t *)cr->desc, *fd = (uint64_t *)fr->desc;
    for (uint32_t i = 0; i < n; i++)
        fd[(fprod + i) & mask] = cd[(cons + i) & mask];
    store_rel(fr->prod, fprod + n);
    store_rel(cr->cons, cons + n);
    return n;
}

static PyObject *l2fwd(PyObject *self, PyObject *args) {
    int fd;
    PyObject *offs;
    unsigned int size, limit;
    Py_buffer ub, rb, fb, tb, cb;
    if (!PyArg_ParseTuple(args, "iw*w*w*w*w*OII", &fd, &ub, &rb, &fb, &tb, &cb, &offs, &size,
                          &limit))
        return NULL;
    PyObject *ret = NULL;
    int o[12];
    struct ring rx, fr, tx, cr;
    uint32_t put = 0, done = 0, mask = size - 1;
    int err = 0;
    if (!size || size & mask || !PyTuple_Check(offs) || PyTuple_GET_SIZE(offs) != 12) {
        PyErr_SetString(PyExc_ValueError, "size must be a power of two, offsets 12 ints");
        goto out;
    }
    for (int i = 0; i < 12; i++) {
        o[i] = (int)PyLong_AsLong(PyTuple_GET_ITEM(offs, i));
        if (o[i] == -1 && PyErr_Occurred())
            goto out;
    }
    if (ring_at(&rb, o[0], o[1], o[2], (Py_ssize_t)size * 16, &rx) < 0 ||
        ring_at(&fb, o[3], o[4], o[5], (Py_ssize_t)size * 8, &fr) < 0 ||
        ring_at(&tb, o[6], o[7], o[8], (Py_ssize_t)size * 16, &tx) < 0 ||
        ring_at(&cb, o[9], o[10], o[11], (Py_ssize_t)size * 8, &cr) < 0)
        goto out;
    uint8_t *umem = ub.buf;
    uint64_t umem_len = (uint64_t)ub.len;

    Py_BEGIN_ALLOW_THREADS
    done += reap(&cr, &fr, mask);
    uint32_t rcons = *rx.cons, n = load_acq(rx.prod) - rcons;
    if (n > limit)
        n = limit;
    uint32_t tprod = *tx.prod, room = size - (tprod - load_acq(tx.cons));
    put = n < room ? n : room;
    uint32_t fprod = *fr.prod;
    uint64_t *fdesc = (uint64_t *)fr.desc;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t *d = rx.desc + (size_t)((rcons + i) & mask) * 16;
        uint64_t addr;
        uint32_t len;
        memcpy(&addr, d, 8);
        memcpy(&len, d + 8, 4);
        if (i < put) {
            if (addr + 12 <= umem_len) {
                uint8_t tmp[6], *f = umem + addr;
                memcpy(tmp, f, 6);
                memmove(f, f + 6, 6);
                memcpy(f + 6, tmp, 6);
            }
            uint8_t *t = tx.desc + (size_t)((tprod + i) & mask) * 16;
            uint32_t options = 0;
            memcpy(t, &addr, 8);
            memcpy(t + 8, &len, 4);
            memcpy(t + 12, &options, 4);
        } else {
            fdesc[fprod++ & mask] = addr; /* no room on TX: back to the fill ring */
        }
    }
    if (n) {
        store_rel(fr.prod, fprod);
        store_rel(tx.prod, tprod + put);
        store_rel(rx.cons, rcons + n);
    }
    for (int k = 0; k < 64 && load_acq(tx.cons) != *tx.prod; k++) {
        if (sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0) < 0 && errno != ENOBUFS &&
            errno != EAGAIN && errno != EBUSY && errno != ENETDOWN && errno != EINTR) {
            err = errno;
            break;
        }
    }
    done += reap(&cr, &fr, mask);
    Py_END_ALLOW_THREADS

    if (err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        goto out;
    }
    ret = Py_BuildValue("II", put, done);
out:
    PyBuffer_Release(&ub);
    PyBuffer_Release(&rb);
    PyBuffer_Release(&fb);
    PyBuffer_Release(&tb);
    PyBuffer_Release(&cb);
    return ret;
}

static PyMethodDef methods[] = {
    {"l2fwd", l2fwd, METH_VARARGS, "One l2fwd step over an AF_XDP socket's rings."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_xsk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__xsk(void) { return PyModule_Create(&module); }
