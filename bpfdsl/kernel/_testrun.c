/* bpfdsl.kernel._testrun: the batch form of BPF_PROG_TEST_RUN (issue #25).
 *
 * One C loop over a batch of frames, each given as an (offset, length) span of one
 * buffer (the mapped capture): for each, the data_in/data_size_in/data_size_out fields
 * of the caller's one bpf_attr are set and bpf(2) is called, with the system call number,
 * the command and the attr's field offsets all given by bpfdsl/kernel/syscall.py
 * (TestRunner.run_spans, the only caller): the layout of union bpf_attr stays in
 * bpfdsl/abi/bpf_attr.py, and this is the same command syscall.py issues, in a loop.
 *
 * Built only with BPFDSL_COMPILE=1 (setup.py); without it syscall.TestRunner.run_spans
 * runs the same loop in Python.
 *
 * run_spans(nr, cmd, attr, layout, data, offsets, lengths, start, end, out_cap,
 *           min_len, skips, retvals) -> (next, errno, counts)
 *
 *   nr, cmd    the bpf(2) system call number of this machine and BPF_PROG_TEST_RUN
 *   attr       writable buffer: the TestRunAttr (prog_fd, repeat, data_out set by the caller)
 *   layout     (off data_in, off data_size_in, off data_size_out, off retval): byte offsets
 *   data       buffer holding the frames (read only)
 *   offsets    buffer of uint64: frame i starts at data + offsets[i]
 *   lengths    buffer of uint32: frame i is lengths[i] bytes
 *   start, end the spans [start, end) to run
 *   out_cap    data_size_out for every run (the size of the attr's data_out buffer)
 *   min_len    frames shorter than this are not run (counted under retval -1)
 *   skips      tuple of (src, src_off, dst, dst_off, least): after each run, when the
 *              uint64 at src + src_off is at least `least` past the one at dst + dst_off,
 *              it is stored there (an event ring's consumer position set to its
 *              producer's once `least` bytes of records wait: the records dropped)
 *   retvals    None, or a writable buffer of int64, one per span: the frame's retval
 *              (-1: not run)
 *
 * Returns the index of the first span not run (end when all were) and the errno of the
 * failed run at that index (0 when none failed: the caller runs that frame again its own
 * way to say what the error means), and {retval: frames} of the spans run (-1: too short).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define MAX_SKIPS 64
#define TABLE 32

struct skip {
    const volatile uint64_t *src;
    volatile uint64_t *dst;
    uint64_t least;
};

static int get_u64_ptr(PyObject *obj, Py_ssize_t off, int writable, Py_buffer *view,
                       void **ptr) {
    if (PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        return -1;
    if (off < 0 || off + 8 > view->len || off % 8) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "skip offset outside its buffer or not 8-aligned");
        return -1;
    }
    *ptr = (char *)view->buf + off;
    return 0;
}

static PyObject *run_spans(PyObject *self, PyObject *args) {
    long nr;
    int cmd;
    PyObject *attr_o, *data_o, *offs_o, *lens_o, *skips_o, *rets_o;
    Py_ssize_t o_din, o_dsin, o_dsout, o_ret, start, end;
    unsigned long out_cap, min_len;
    if (!PyArg_ParseTuple(args, "liO(nnnn)OOOnnkkOO", &nr, &cmd, &attr_o, &o_din, &o_dsin,
                          &o_dsout, &o_ret, &data_o, &offs_o, &lens_o, &start, &end, &out_cap,
                          &min_len, &skips_o, &rets_o))
        return NULL;
    if (!PyTuple_Check(skips_o) || PyTuple_GET_SIZE(skips_o) > MAX_SKIPS) {
        PyErr_SetString(PyExc_TypeError,
                        "skips: a tuple of at most 64 (src, off, dst, off, least)");
        return NULL;
    }
    Py_buffer attr, data, offs, lens, rets;
    Py_buffer sk_views[2 * MAX_SKIPS];
    struct skip sk[MAX_SKIPS];
    Py_ssize_t nsk = 0, nviews = 0;
    int have_rets = rets_o != Py_None;
    PyObject *result = NULL;
    int got_attr = 0, got_data = 0, got_offs = 0, got_lens = 0, got_rets = 0;

    if (PyObject_GetBuffer(attr_o, &attr, PyBUF_WRITABLE) < 0) goto done;
    got_attr = 1;
    if (PyObject_GetBuffer(data_o, &data, PyBUF_SIMPLE) < 0) goto done;
    got_data = 1;
    if (PyObject_GetBuffer(offs_o, &offs, PyBUF_SIMPLE) < 0) goto done;
    got_offs = 1;
    if (PyObject_GetBuffer(lens_o, &lens, PyBUF_SIMPLE) < 0) goto done;
    got_lens = 1;
    if (have_rets) {
        if (PyObject_GetBuffer(rets_o, &rets, PyBUF_WRITABLE) < 0) goto done;
        got_rets = 1;
    }
    Py_ssize_t nspans = lens.len / 4;
    if (offs.len / 8 < nspans) nspans = offs.len / 8;
    if (start < 0 || end > nspans || start > end ||
        (have_rets && rets.len / 8 < end)) {
        PyErr_SetString(PyExc_ValueError, "span range outside the offsets/lengths/retvals");
        goto done;
    }
    Py_ssize_t at[4] = {o_din, o_dsin, o_dsout, o_ret}, size[4] = {8, 4, 4, 4};
    for (int k = 0; k < 4; k++) {
        if (at[k] < 0 || at[k] + size[k] > attr.len) {
            PyErr_SetString(PyExc_ValueError, "attr layout outside the attr buffer");
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(skips_o); i++) {
        PyObject *t = PyTuple_GET_ITEM(skips_o, i);
        PyObject *src, *dst;
        Py_ssize_t soff, doff;
        unsigned long long least;
        if (!PyArg_ParseTuple(t, "OnOnK", &src, &soff, &dst, &doff, &least)) goto done;
        void *sp, *dp;
        if (get_u64_ptr(src, soff, 0, &sk_views[nviews], &sp) < 0) goto done;
        nviews++;
        if (get_u64_ptr(dst, doff, 1, &sk_views[nviews], &dp) < 0) goto done;
        nviews++;
        sk[nsk].src = sp;
        sk[nsk].dst = dp;
        sk[nsk].least = least;
        nsk++;
    }

    const uint64_t *off = offs.buf;
    const uint32_t *len = lens.buf;
    int64_t *rv = have_rets ? rets.buf : NULL;
    char *a = attr.buf;
    uint64_t base = (uint64_t)(uintptr_t)data.buf;
    uint64_t dlen = (uint64_t)data.len;
    int64_t keys[TABLE];
    Py_ssize_t counts[TABLE];
    int nkeys = 0;
    PyObject *spill = NULL; /* retvals past the table's TABLE distinct ones */
    Py_ssize_t i = start;
    int err = 0;
    unsigned int asize = (unsigned int)attr.len;

    for (; i < end; i++) {
        int64_t r;
        if (off[i] > dlen || len[i] > dlen - off[i]) {
            PyErr_SetString(PyExc_ValueError, "a span outside the data buffer");
            goto done_counts;
        }
        if (len[i] < min_len) {
            r = -1;
        } else {
            uint64_t din = base + off[i];
            uint32_t n = len[i], cap = (uint32_t)out_cap;
            memcpy(a + o_din, &din, 8);
            memcpy(a + o_dsin, &n, 4);
            memcpy(a + o_dsout, &cap, 4);
            long ret = -1;
            Py_BEGIN_ALLOW_THREADS
            for (int tries = 0; tries < 8; tries++) {
                ret = syscall(nr, cmd, a, asize);
                if (ret >= 0 || errno != EINTR) break;
            }
            if (ret < 0) err = errno;
            Py_END_ALLOW_THREADS
            if (ret < 0) break;
            uint32_t retval;
            memcpy(&retval, a + o_ret, 4);
            r = retval;
            for (Py_ssize_t k = 0; k < nsk; k++) {
                uint64_t pos = __atomic_load_n(sk[k].src, __ATOMIC_ACQUIRE);
                if (pos - *sk[k].dst >= sk[k].least)
                    __atomic_store_n(sk[k].dst, pos, __ATOMIC_RELEASE);
            }
        }
        if (rv) rv[i] = r;
        int k = 0;
        while (k < nkeys && keys[k] != r) k++;
        if (k < nkeys) {
            counts[k]++;
        } else if (nkeys < TABLE) {
            keys[nkeys] = r;
            counts[nkeys++] = 1;
        } else {
            if (spill == NULL && (spill = PyDict_New()) == NULL) goto done_counts;
            PyObject *key = PyLong_FromLongLong(r);
            if (key == NULL) goto done_counts;
            PyObject *old = PyDict_GetItemWithError(spill, key);
            Py_ssize_t c = old ? PyLong_AsSsize_t(old) + 1 : 1;
            PyObject *val = PyLong_FromSsize_t(c);
            int bad = val == NULL || PyDict_SetItem(spill, key, val) < 0;
            Py_DECREF(key);
            Py_XDECREF(val);
            if (bad) goto done_counts;
        }
    }
    {
        PyObject *d = spill ? spill : PyDict_New();
        spill = NULL;
        if (d == NULL) goto done_counts;
        for (int k = 0; k < nkeys; k++) {
            PyObject *key = PyLong_FromLongLong(keys[k]);
            PyObject *val = PyLong_FromSsize_t(counts[k]);
            int bad = key == NULL || val == NULL || PyDict_SetItem(d, key, val) < 0;
            Py_XDECREF(key);
            Py_XDECREF(val);
            if (bad) {
                Py_DECREF(d);
                goto done_counts;
            }
        }
        result = Py_BuildValue("niN", i, err, d);
    }
done_counts:
    Py_XDECREF(spill);
done:
    for (Py_ssize_t v = 0; v < nviews; v++) PyBuffer_Release(&sk_views[v]);
    if (got_rets) PyBuffer_Release(&rets);
    if (got_lens) PyBuffer_Release(&lens);
    if (got_offs) PyBuffer_Release(&offs);
    if (got_data) PyBuffer_Release(&data);
    if (got_attr) PyBuffer_Release(&attr);
    return result;
}

static PyMethodDef methods[] = {
    {"run_spans", run_spans, METH_VARARGS,
     "BPF_PROG_TEST_RUN of each (offset, length) span of a buffer (see the file's comment)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "bpfdsl.kernel._testrun",
    "The batch form of BPF_PROG_TEST_RUN (bpfdsl.kernel.syscall.TestRunner.run_spans).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__testrun(void) { return PyModule_Create(&module); }
