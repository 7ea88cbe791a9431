/* bpfdsl.runtime._pcapwalk: the walk over the plain records of a mapped classic pcap
 * file (issue #25), the loop of bpfdsl/runtime/pcapfile.py CaptureReader._mapped_spans in
 * C.  It takes only the records that loop takes as they are and stops at the first other
 * one, which pcapfile.py then reads by libpcap's rules in full: the rules stay there.
 *
 * Built only with BPFDSL_COMPILE=1 (setup.py); without it pcapfile.py walks in Python.
 *
 * walk(data, pos, room, hdrsize, swap, most, strict) -> (pos, offsets, lengths, wirelens)
 *
 *   data     the mapped file (any buffer)
 *   pos      byte offset of the first record header
 *   room     at most this many records
 *   hdrsize  the record header size (16, or 24 for Kuznetzov's format)
 *   swap     the file's byte order is not the host's
 *   most     the longest record taken as it is (min(snapshot, link type maximum))
 *   strict   caplen/wirelen may be swapped (pcap 2.3): stop at a record with caplen > len
 *
 * Stops at the end of the buffer, at a header that does not fit, at a record longer than
 * `most` or than what remains of the buffer, or (strict) with caplen > wirelen.  Returns
 * the offset after the last record taken and, as bytes of native uint64/uint32/uint32
 * (array('Q')/array('I').frombytes), the data offset, caplen and wirelen of each.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *walk(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *data_o;
    Py_ssize_t pos, room, hdr;
    int swap, strict;
    unsigned long most;
    if (!PyArg_ParseTuple(args, "Onnnpkp", &data_o, &pos, &room, &hdr, &swap, &most, &strict))
        return NULL;
    if (hdr < 16 || room < 0 || pos < 0) {
        PyErr_SetString(PyExc_ValueError, "walk: bad header size, room or position");
        return NULL;
    }
    Py_buffer data;
    if (PyObject_GetBuffer(data_o, &data, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *offs = PyBytes_FromStringAndSize(NULL, room * 8);
    PyObject *lens = PyBytes_FromStringAndSize(NULL, room * 4);
    PyObject *wires = PyBytes_FromStringAndSize(NULL, room * 4);
    PyObject *result = NULL;
    if (offs == NULL || lens == NULL || wires == NULL) goto done;
    uint64_t *o = (uint64_t *)PyBytes_AS_STRING(offs);
    uint32_t *l = (uint32_t *)PyBytes_AS_STRING(lens);
    uint32_t *w = (uint32_t *)PyBytes_AS_STRING(wires);
    const unsigned char *b = data.buf;
    Py_ssize_t end = data.len, k = 0;
    while (k < room && pos <= end - hdr) {
        uint32_t caplen, wirelen;
        memcpy(&caplen, b + pos + 8, 4);
        memcpy(&wirelen, b + pos + 12, 4);
        if (swap) {
            caplen = __builtin_bswap32(caplen);
            wirelen = __builtin_bswap32(wirelen);
        }
        Py_ssize_t d = pos + hdr;
        if (caplen > most || (Py_ssize_t)caplen > end - d || (strict && caplen > wirelen))
            break;
        o[k] = (uint64_t)d;
        l[k] = caplen;
        w[k] = wirelen;
        pos = d + caplen;
        k++;
    }
    if (_PyBytes_Resize(&offs, k * 8) < 0 || _PyBytes_Resize(&lens, k * 4) < 0 ||
        _PyBytes_Resize(&wires, k * 4) < 0)
        goto done;
    result = Py_BuildValue("nOOO", pos, offs, lens, wires);
done:
    Py_XDECREF(offs);
    Py_XDECREF(lens);
    Py_XDECREF(wires);
    PyBuffer_Release(&data);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "The plain records of a mapped pcap file (see the file's comment)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "bpfdsl.runtime._pcapwalk",
    "The walk over the plain records of a mapped pcap file (bpfdsl.runtime.pcapfile).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__pcapwalk(void) { return PyModule_Create(&module); }
