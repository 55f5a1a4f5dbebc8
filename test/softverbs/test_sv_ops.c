/*
 * softverbs: device attributes, every RC operation between two processes,
 * data integrity across sizes and offsets, ordering, UD, completion channels
 * and many processes.
 */
#include "svt.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

TH_TEST(softverbs, device_attrs)
{
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    union ibv_gid gid;
    __be16 pkey;
    svt_ep_t ep;

    svt_ep_open(&ep, IBV_QPT_RC, 0, 0);
    TH_ASSERT_EQ(ibv_query_device(ep.ctx, &da), 0);
    TH_ASSERT_EQ(da.phys_port_cnt, 1);
    TH_ASSERT_EQ(da.atomic_cap, IBV_ATOMIC_HCA);
    TH_ASSERT_GT(da.max_sge, 1);
    TH_ASSERT_EQ(ibv_query_port(ep.ctx, 1, &pa), 0);
    TH_ASSERT_EQ(pa.state, IBV_PORT_ACTIVE);
    TH_ASSERT_EQ(pa.link_layer, IBV_LINK_LAYER_INFINIBAND);
    TH_ASSERT_EQ(pa.active_mtu, IBV_MTU_4096);
    TH_ASSERT_NE(pa.lid, 0);
    TH_ASSERT_EQ(ibv_query_gid(ep.ctx, 1, 0, &gid), 0);
    TH_ASSERT_NE(gid.global.interface_id, 0);
    TH_ASSERT_EQ(ibv_query_pkey(ep.ctx, 1, 0, &pkey), 0);
    TH_ASSERT_EQ(be16toh(pkey), 0xffff);
    TH_ASSERT_GE(ep.ctx->async_fd, 0);
    TH_ASSERT_EQ(ep.qp->state, IBV_QPS_RESET);
    svt_ep_close(&ep);
}

/* The limits the device advertises are the ones it enforces: objects at
 * each limit can be created and used, one more is refused. (The checks
 * above compare with the values softverbs states; these would catch a
 * stated value that is not the real one.) */
TH_TEST(softverbs, device_limits_enforced)
{
    struct ibv_qp_init_attr qa, qa1;
    struct ibv_srq_init_attr sa;
    struct ibv_device_attr da;
    struct ibv_sge *sge;
    struct ibv_srq *srq;
    struct ibv_qp *qp;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    struct ibv_wc wc;
    svt_info_t info;
    uint8_t *buf;
    svt_ep_t ep, tmp;
    int i;

    svt_ep_open(&ep, IBV_QPT_RC, 0, 0);
    TH_ASSERT_EQ(ibv_query_device(ep.ctx, &da), 0);

    /* QPs: max_qp_wr send WRs and max_sge SGEs, and not one more */
    memset(&qa, 0, sizeof(qa));
    qa.send_cq          = ep.scq;
    qa.recv_cq          = ep.rcq;
    qa.qp_type          = IBV_QPT_RC;
    qa.cap.max_send_wr  = da.max_qp_wr;
    qa.cap.max_recv_wr  = 1;
    qa.cap.max_send_sge = da.max_sge;
    qa.cap.max_recv_sge = 1;
    qp                  = ibv_create_qp(ep.pd, &qa);
    TH_ASSERT(qp != NULL);
    TH_ASSERT_EQ(ibv_destroy_qp(qp), 0);
    qa1 = qa;
    ++qa1.cap.max_send_wr;
    TH_ASSERT(ibv_create_qp(ep.pd, &qa1) == NULL);
    qa1 = qa;
    ++qa1.cap.max_send_sge;
    TH_ASSERT(ibv_create_qp(ep.pd, &qa1) == NULL);

    /* CQs: max_cqe entries */
    cq = ibv_create_cq(ep.ctx, da.max_cqe, NULL, NULL, 0);
    TH_ASSERT(cq != NULL);
    TH_ASSERT_EQ(ibv_destroy_cq(cq), 0);
    TH_ASSERT(ibv_create_cq(ep.ctx, da.max_cqe + 1, NULL, NULL, 0) == NULL);

    /* SRQs: max_srq_sge SGEs per receive */
    memset(&sa, 0, sizeof(sa));
    sa.attr.max_wr  = 16;
    sa.attr.max_sge = da.max_srq_sge;
    srq             = ibv_create_srq(ep.pd, &sa);
    TH_ASSERT(srq != NULL);
    TH_ASSERT_EQ(ibv_destroy_srq(srq), 0);
    ++sa.attr.max_sge;
    TH_ASSERT(ibv_create_srq(ep.pd, &sa) == NULL);

    /* one WRITE that gathers max_sge pieces lands whole; a WR with one
     * SGE more is refused when posted */
    qa.cap.max_send_wr = 4;
    qp                 = ibv_create_qp(ep.pd, &qa);
    TH_ASSERT(qp != NULL);
    memset(&tmp, 0, sizeof(tmp));
    tmp.ctx = ep.ctx;
    tmp.qp  = qp;
    info    = svt_info(&tmp, NULL);
    svt_rc_connect(&tmp, &info); /* to itself */
    buf = aligned_alloc(4096, 2 * 4096);
    TH_ASSERT(buf != NULL);
    memset(buf, 0, 2 * 4096);
    th_fill_pattern(buf, 4096, 21);
    mr = ibv_reg_mr(ep.pd, buf, 2 * 4096, SVT_ALL_ACCESS);
    TH_ASSERT(mr != NULL);
    sge = calloc(da.max_sge + 1, sizeof(*sge));
    TH_ASSERT(sge != NULL);
    for (i = 0; i <= da.max_sge; ++i) {
        sge[i] = svt_sge(buf + i * 7, 7, mr);
    }
    TH_ASSERT_NE(svt_post(qp, IBV_WR_RDMA_WRITE, sge, da.max_sge + 1,
                          (uintptr_t)buf + 4096, mr->rkey, 1,
                          IBV_SEND_SIGNALED),
                 0);
    TH_ASSERT_EQ(svt_post(qp, IBV_WR_RDMA_WRITE, sge, da.max_sge,
                          (uintptr_t)buf + 4096, mr->rkey, 2,
                          IBV_SEND_SIGNALED),
                 0);
    svt_poll(ep.scq, &wc, 10);
    TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    TH_ASSERT_EQ(wc.wr_id, 2);
    TH_CHECK_PATTERN(buf + 4096, (size_t)da.max_sge * 7, 21);
    TH_ASSERT_EQ(buf[4096 + da.max_sge * 7], 0);

    free(sge);
    ibv_dereg_mr(mr);
    free(buf);
    TH_ASSERT_EQ(ibv_destroy_qp(qp), 0);
    svt_ep_close(&ep);
}

/* The port's active MTU is the largest UD payload: a datagram of that
 * size goes, one byte more fails locally */
TH_TEST(softverbs, port_mtu_enforced)
{
    struct ibv_send_wr wr, *bad;
    struct ibv_port_attr pa;
    struct ibv_ah_attr aa;
    struct ibv_qp_attr a;
    struct ibv_sge sge;
    struct ibv_ah *ah;
    struct ibv_mr *mr;
    struct ibv_wc wc;
    uint8_t *buf;
    size_t mtu;
    svt_ep_t ep;

    svt_ep_open(&ep, IBV_QPT_UD, 0, 0);
    TH_ASSERT_EQ(ibv_query_port(ep.ctx, 1, &pa), 0);
    mtu = 128u << pa.active_mtu; /* IBV_MTU_256 is 1 */
    buf = aligned_alloc(4096, 4 * mtu);
    TH_ASSERT(buf != NULL);
    memset(buf, 0, 4 * mtu);
    mr = ibv_reg_mr(ep.pd, buf, 4 * mtu, IBV_ACCESS_LOCAL_WRITE);
    TH_ASSERT(mr != NULL);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey     = 0x11111111;
    TH_ASSERT_EQ(ibv_modify_qp(ep.qp, &a,
                               IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                       IBV_QP_QKEY),
                 0);
    a.qp_state = IBV_QPS_RTR;
    TH_ASSERT_EQ(ibv_modify_qp(ep.qp, &a, IBV_QP_STATE), 0);
    a.qp_state = IBV_QPS_RTS;
    TH_ASSERT_EQ(ibv_modify_qp(ep.qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
    svt_post_recv(ep.qp, buf + 2 * mtu, mtu + 40, mr->lkey, 7);
    memset(&aa, 0, sizeof(aa));
    aa.dlid     = pa.lid;
    aa.port_num = 1;
    ah          = ibv_create_ah(ep.pd, &aa);
    TH_ASSERT(ah != NULL);

    th_fill_pattern(buf, mtu + 1, 31);
    memset(&wr, 0, sizeof(wr));
    wr.opcode            = IBV_WR_SEND;
    wr.sg_list           = &sge;
    wr.num_sge           = 1;
    wr.send_flags        = IBV_SEND_SIGNALED;
    wr.wr.ud.ah          = ah;
    wr.wr.ud.remote_qpn  = ep.qp->qp_num;
    wr.wr.ud.remote_qkey = 0x11111111;
    sge                  = svt_sge(buf, mtu, mr);
    wr.wr_id             = 1;
    TH_ASSERT_EQ(ibv_post_send(ep.qp, &wr, &bad), 0);
    svt_poll(ep.scq, &wc, 10);
    TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    svt_poll(ep.rcq, &wc, 10);
    TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    TH_ASSERT_EQ(wc.byte_len, mtu + 40);
    TH_CHECK_PATTERN(buf + 2 * mtu + 40, mtu, 31);

    sge      = svt_sge(buf, mtu + 1, mr);
    wr.wr_id = 2;
    TH_ASSERT_EQ(ibv_post_send(ep.qp, &wr, &bad), 0);
    svt_poll(ep.scq, &wc, 10);
    TH_ASSERT_EQ(wc.wr_id, 2);
    TH_ASSERT_EQ(wc.status, IBV_WC_LOC_LEN_ERR);

    ibv_destroy_ah(ah);
    ibv_dereg_mr(mr);
    svt_ep_close(&ep);
    free(buf);
}

/* ---------------------------------------------------------------------- */

#define OPS_BUF (64 * 1024)

static void ops_target(th_oob_t *oob, svt_ep_t *ep, struct ibv_mr *mr,
                       uint8_t *buf, const svt_info_t *peer)
{
    uint8_t expect[128];
    struct ibv_wc wc;
    uint64_t v;

    /* receives first: they are consumed by the initiator's SENDs */
    svt_post_recv(ep->qp, buf, 4096, mr->lkey, 101);
    svt_post_recv(ep->qp, buf + 4096, 4096, mr->lkey, 102);
    svt_post_recv(ep->qp, buf + 8192, 0, mr->lkey, 103);
    th_fill_pattern(buf + 32768, 500, 5);
    v = 100;
    memcpy(buf + 49152, &v, 8);
    th_oob_barrier(oob);          /* ready */
    th_oob_barrier(oob);          /* initiator done: no verbs call here */

    svt_poll(ep->rcq, &wc, 10);
    TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    TH_ASSERT_EQ(wc.wr_id, 101);
    TH_ASSERT_EQ(wc.opcode, IBV_WC_RECV);
    TH_ASSERT_EQ(wc.byte_len, 100);
    TH_ASSERT_EQ(wc.src_qp, peer->qpn);
    TH_ASSERT_EQ(wc.qp_num, ep->qp->qp_num);
    TH_CHECK_PATTERN(buf, 100, 1);

    svt_poll(ep->rcq, &wc, 10);
    TH_ASSERT_EQ(wc.wr_id, 102);
    TH_ASSERT_EQ(wc.byte_len, 60);
    TH_ASSERT(wc.wc_flags & IBV_WC_WITH_IMM);
    TH_ASSERT_EQ(be32toh(wc.imm_data), 0x1234abcd);
    th_fill_pattern(expect, 60, 2);
    TH_ASSERT_MEM_EQ(buf + 4096, expect, 60);

    svt_poll(ep->rcq, &wc, 10);
    TH_ASSERT_EQ(wc.wr_id, 103);
    TH_ASSERT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    TH_ASSERT_EQ(wc.byte_len, 200);
    TH_ASSERT_EQ(be32toh(wc.imm_data), 0x1234abcd);

    TH_CHECK_PATTERN(buf + 16384, 1000, 3);
    TH_CHECK_PATTERN(buf + 17408, 32, 4);
    TH_CHECK_PATTERN(buf + 18432, 200, 6);
    memcpy(&v, buf + 49152, 8);
    TH_ASSERT_EQ(v, 7);
    TH_ASSERT_EQ(ibv_poll_cq(ep->rcq, 1, &wc), 0);
}

static void ops_initiator(th_oob_t *oob, svt_ep_t *ep, struct ibv_mr *mr,
                          uint8_t *buf, const svt_info_t *peer)
{
    struct ibv_sge sge[3];
    struct ibv_wc wc;
    uint64_t old;

    th_oob_barrier(oob);
    th_fill_pattern(buf, 100, 1);
    sge[0] = svt_sge(buf, 100, mr);
    TH_ASSERT_EQ(svt_post(ep->qp, IBV_WR_SEND, sge, 1, 0, 0, 1,
                          IBV_SEND_SIGNALED), 0);
    svt_poll(ep->scq, &wc, 10);
    TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    TH_ASSERT_EQ(wc.opcode, IBV_WC_SEND);
    TH_ASSERT_EQ(wc.wr_id, 1);

    /* multi-SGE SEND with immediate: 10 + 20 + 30 bytes */
    th_fill_pattern(buf + 1000, 60, 2);
    sge[0] = svt_sge(buf + 1000, 10, mr);
    sge[1] = svt_sge(buf + 1010, 20, mr);
    sge[2] = svt_sge(buf + 1030, 30, mr);
    TH_ASSERT_EQ(svt_post(ep->qp, IBV_WR_SEND_WITH_IMM, sge, 3, 0, 0, 2,
                          IBV_SEND_SIGNALED), 0);
    svt_poll(ep->scq, &wc, 10);
    TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    TH_ASSERT_EQ(wc.wr_id, 2);

    /* unsignaled WRITE, then an inline signaled WRITE: one completion */
    th_fill_pattern(buf + 2048, 1000, 3);
    th_fill_pattern(buf + 4096, 32, 4);
    sge[0] = svt_sge(buf + 2048, 1000, mr);
    TH_ASSERT_EQ(svt_post(ep->qp, IBV_WR_RDMA_WRITE, sge, 1,
                          peer->addr + 16384, peer->rkey, 3, 0), 0);
    sge[0] = svt_sge(buf + 4096, 32, mr);
    TH_ASSERT_EQ(svt_post(ep->qp, IBV_WR_RDMA_WRITE, sge, 1,
                          peer->addr + 17408, peer->rkey, 4,
                          IBV_SEND_SIGNALED | IBV_SEND_INLINE), 0);
    memset(buf + 4096, 0, 32);  /* inline: the buffer is free at once */
    svt_poll(ep->scq, &wc, 10);
    TH_ASSERT_EQ(wc.wr_id, 4);
    TH_ASSERT_EQ(wc.opcode, IBV_WC_RDMA_WRITE);

    th_fill_pattern(buf + 5000, 200, 6);
    sge[0] = svt_sge(buf + 5000, 200, mr);
    TH_ASSERT_EQ(svt_post(ep->qp, IBV_WR_RDMA_WRITE_WITH_IMM, sge, 1,
                          peer->addr + 18432, peer->rkey, 5,
                          IBV_SEND_SIGNALED), 0);
    svt_poll(ep->scq, &wc, 10);
    TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    TH_ASSERT_EQ(wc.wr_id, 5);

    sge[0] = svt_sge(buf + 8192, 500, mr);
    TH_ASSERT_EQ(svt_post(ep->qp, IBV_WR_RDMA_READ, sge, 1,
                          peer->addr + 32768, peer->rkey, 6,
                          IBV_SEND_SIGNALED), 0);
    svt_poll(ep->scq, &wc, 10);
    TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    TH_ASSERT_EQ(wc.opcode, IBV_WC_RDMA_READ);
    TH_ASSERT_EQ(wc.byte_len, 500);
    TH_CHECK_PATTERN(buf + 8192, 500, 5);

    /* atomics: 100 + 5 -> 105; cswap(105 -> 7); failed cswap(1 -> 9) */
    {
        struct ibv_send_wr wr, *bad;
        uint64_t cmp[3] = { 5, 105, 1 }, swp[3] = { 0, 7, 9 };
        uint64_t res[3] = { 100, 105, 7 };
        int i;

        for (i = 0; i < 3; ++i) {
            memset(&wr, 0, sizeof(wr));
            sge[0] = svt_sge(buf + 12288, 8, mr);
            wr.wr_id      = 7 + i;
            wr.opcode     = i ? IBV_WR_ATOMIC_CMP_AND_SWP :
                                IBV_WR_ATOMIC_FETCH_AND_ADD;
            wr.sg_list    = sge;
            wr.num_sge    = 1;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.wr.atomic.remote_addr = peer->addr + 49152;
            wr.wr.atomic.rkey        = peer->rkey;
            wr.wr.atomic.compare_add = cmp[i];
            wr.wr.atomic.swap        = swp[i];
            TH_ASSERT_EQ(ibv_post_send(ep->qp, &wr, &bad), 0);
            svt_poll(ep->scq, &wc, 10);
            TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
            TH_ASSERT_EQ(wc.opcode, i ? IBV_WC_COMP_SWAP : IBV_WC_FETCH_ADD);
            memcpy(&old, buf + 12288, 8);
            TH_ASSERT_EQ(old, res[i]);
        }
    }
    th_oob_barrier(oob);
}

static void ops_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    svt_info_t peer;
    struct ibv_mr *mr;
    uint8_t *buf;
    svt_ep_t ep;

    (void)nprocs; (void)arg;
    mr = svt_rc_pair(oob, rank, &ep, OPS_BUF, 0, &buf, &peer);
    if (rank == 1) {
        ops_target(oob, &ep, mr, buf, &peer);
    } else {
        ops_initiator(oob, &ep, mr, buf, &peer);
    }
    th_oob_barrier(oob);
    TH_ASSERT_EQ(ibv_dereg_mr(mr), 0);
    svt_ep_close(&ep);
    free(buf);
}

SVT_TEST_HOSTS(rc_ops)
{
    svt_need_device();
    th_run_procs(2, ops_rank, NULL);
}

/* ---------------------------------------------------------------------- */

#define INTEG_MAX (16u << 20)

static void integrity_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    static const size_t sizes[] = { 0, 1, 3, 4095, 4097, 65549,
                                    (1u << 20) + 7, INTEG_MAX };
    static const size_t offs[] = { 0, 1, 7 };
    size_t bufsz = INTEG_MAX + 64, si, oi, len, off;
    struct ibv_mr *mr, *mr2;
    svt_info_t mine, peer;
    uint8_t *buf, *buf2;
    struct ibv_sge sge;
    struct ibv_wc wc;
    uint64_t sum;
    svt_ep_t ep;

    (void)nprocs; (void)arg;
    svt_ep_open(&ep, IBV_QPT_RC, 0, 0);
    buf  = aligned_alloc(4096, bufsz);
    buf2 = aligned_alloc(4096, bufsz);
    memset(buf, 0, bufsz);
    memset(buf2, 0, bufsz);
    mr  = ibv_reg_mr(ep.pd, buf, bufsz, SVT_ALL_ACCESS);
    mr2 = ibv_reg_mr(ep.pd, buf2, bufsz, SVT_ALL_ACCESS);
    TH_ASSERT(mr != NULL && mr2 != NULL);
    mine = svt_info(&ep, mr);
    svt_exchange(oob, !rank, &mine, &peer);
    svt_rc_connect(&ep, &peer);
    th_oob_barrier(oob);

    for (si = 0; si < sizeof(sizes) / sizeof(sizes[0]); ++si) {
        for (oi = 0; oi < sizeof(offs) / sizeof(offs[0]); ++oi) {
            len = sizes[si];
            off = offs[oi];
            if (rank == 1) {
                /* SEND target: receive at an odd offset, report checksum */
                svt_post_recv(ep.qp, buf2 + 3, (uint32_t)len + 8, mr2->lkey,
                              si);
                th_oob_barrier(oob);
                svt_poll(ep.rcq, &wc, 30);
                TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
                TH_ASSERT_EQ(wc.byte_len, len);
                sum = th_checksum(buf2 + 3, len);
                th_oob_send(oob, 0, &sum, sizeof(sum));
                th_oob_barrier(oob);
                continue;
            }
            th_fill_pattern(buf + off, len, si * 10 + oi);
            /* WRITE to the peer at another offset, READ it back */
            sge = svt_sge(buf + off, (uint32_t)len, mr);
            TH_ASSERT_EQ(svt_post(ep.qp, IBV_WR_RDMA_WRITE, &sge, 1,
                                  peer.addr + 5 + off, peer.rkey, 1, 0), 0);
            memset(buf2 + off, 0xee, len);
            sge = svt_sge(buf2 + off, (uint32_t)len, mr2);
            TH_ASSERT_EQ(svt_post(ep.qp, IBV_WR_RDMA_READ, &sge, 1,
                                  peer.addr + 5 + off, peer.rkey, 2,
                                  IBV_SEND_SIGNALED), 0);
            svt_poll(ep.scq, &wc, 30);
            TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
            TH_ASSERT_EQ(wc.wr_id, 2);
            TH_CHECK_PATTERN(buf2 + off, len, si * 10 + oi);

            th_oob_barrier(oob);
            sge = svt_sge(buf + off, (uint32_t)len, mr);
            TH_ASSERT_EQ(svt_post(ep.qp, IBV_WR_SEND, &sge, 1, 0, 0, 3,
                                  IBV_SEND_SIGNALED), 0);
            svt_poll(ep.scq, &wc, 30);
            TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
            th_oob_recv(oob, 1, &sum, sizeof(sum));
            TH_ASSERT_EQ(sum, th_checksum(buf + off, len));
            th_oob_barrier(oob);
        }
    }
    th_oob_barrier(oob);
    ibv_dereg_mr(mr);
    ibv_dereg_mr(mr2);
    svt_ep_close(&ep);
    free(buf);
    free(buf2);
}

SVT_TEST_HOSTS_TIMEOUT(integrity_sizes, 120)
{
    svt_need_device();
    setenv("SOFTVERBS_MEMLOCK_LIMIT", "unlimited", 1);
    th_run_procs(2, integrity_rank, NULL);
}

/* ---------------------------------------------------------------------- */

#define ORD_N   100
#define ORD_BIG (2u << 20)

static void ordering_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    size_t bufsz = ORD_BIG + 4096;
    svt_info_t mine, peer;
    struct ibv_sge sge;
    struct ibv_mr *mr;
    struct ibv_wc wc;
    uint64_t i, *slots;
    uint8_t *buf;
    svt_ep_t ep;

    (void)nprocs; (void)arg;
    svt_ep_open(&ep, IBV_QPT_RC, 0, 0);
    buf = aligned_alloc(4096, bufsz);
    memset(buf, 0, bufsz);
    mr = ibv_reg_mr(ep.pd, buf, bufsz, SVT_ALL_ACCESS);
    TH_ASSERT(mr != NULL);
    mine = svt_info(&ep, mr);
    svt_exchange(oob, !rank, &mine, &peer);
    svt_rc_connect(&ep, &peer);
    slots = (uint64_t *)(buf + ORD_BIG);

    if (rank == 1) {
        svt_post_recv(ep.qp, buf + ORD_BIG + 2048, 64, mr->lkey, 9);
        th_oob_barrier(oob);
        /* the SEND was posted last: when it arrives, everything before it
         * (a large WRITE done by the engine, small ones by the poster) is
         * in place */
        svt_poll(ep.rcq, &wc, 30);
        TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        TH_CHECK_PATTERN(buf, ORD_BIG, 77);
        for (i = 0; i < ORD_N; ++i) {
            TH_ASSERT_EQ(slots[i], i + 1);
        }
        th_oob_barrier(oob);
    } else {
        th_oob_barrier(oob);
        th_fill_pattern(buf, ORD_BIG, 77);
        sge = svt_sge(buf, ORD_BIG, mr);
        TH_ASSERT_EQ(svt_post(ep.qp, IBV_WR_RDMA_WRITE, &sge, 1, peer.addr,
                              peer.rkey, 1000, IBV_SEND_SIGNALED), 0);
        for (i = 0; i < ORD_N; ++i) {
            slots[i] = i + 1;
            sge = svt_sge(&slots[i], 8, mr);
            while (svt_post(ep.qp, IBV_WR_RDMA_WRITE, &sge, 1,
                            peer.addr + ORD_BIG + i * 8, peer.rkey, i,
                            IBV_SEND_SIGNALED) == ENOMEM) {
            }
        }
        sge = svt_sge(buf, 8, mr);
        TH_ASSERT_EQ(svt_post(ep.qp, IBV_WR_SEND, &sge, 1, 0, 0, 2000,
                              IBV_SEND_SIGNALED), 0);
        /* completions come in posting order */
        svt_poll(ep.scq, &wc, 30);
        TH_ASSERT_EQ(wc.wr_id, 1000);
        for (i = 0; i < ORD_N; ++i) {
            svt_poll(ep.scq, &wc, 30);
            TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
            TH_ASSERT_EQ(wc.wr_id, i);
        }
        svt_poll(ep.scq, &wc, 30);
        TH_ASSERT_EQ(wc.wr_id, 2000);
        th_oob_barrier(oob);
    }
    ibv_dereg_mr(mr);
    svt_ep_close(&ep);
    free(buf);
}

SVT_TEST_HOSTS(rc_ordering)
{
    svt_need_device();
    setenv("SOFTVERBS_MEMLOCK_LIMIT", "unlimited", 1);
    th_run_procs(2, ordering_rank, NULL);
}

/* ---------------------------------------------------------------------- */

/* A target that sees the last 8 bytes of a WRITE finds all the bytes before
 * them in place too, as on an HCA (eager RDMA protocols poll the tail; the
 * RVMA rings of ucx-hcr do). Each write, at a cache line of the first half
 * of the region (crossing pages), fills its bytes with one value and ends
 * with its number; the target polls for that number, checks the rest and
 * clears it; the initiator starts the next write when the target says so. */
#define TAIL_WRITES 5000
#define TAIL_MAX    (512u << 10)

static size_t tail_write_size(unsigned i)
{
    /* the largest one goes by the engine thread */
    static const size_t sizes[] = {24, 200, 1000, 1500, 4096, 9000, 32768,
                                   TAIL_MAX / 2};

    return sizes[i % (sizeof(sizes) / sizeof(sizes[0]))];
}

static void tail_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    size_t size, off, bad = 0, first_bad = 0;
    svt_info_t peer;
    double deadline;
    struct ibv_sge sge;
    struct ibv_mr *mr;
    struct ibv_wc wc;
    uint64_t tail;
    uint8_t *buf, value;
    svt_ep_t ep;
    unsigned i;
    size_t j;
    char go = 'g';

    (void)nprocs; (void)arg;
    mr = svt_rc_pair(oob, rank, &ep, TAIL_MAX, 0, &buf, &peer);
    for (i = 1; i <= TAIL_WRITES; ++i) {
        size  = tail_write_size(i);
        off   = (i * 13 * 64) % (TAIL_MAX / 2);  /* + size <= TAIL_MAX */
        value = (uint8_t)(i * 37) | 1; /* never the cleared 0 */
        tail  = i;
        if (rank == 0) {
            memset(buf, value, size - sizeof(tail));
            memcpy(buf, &tail, sizeof(tail));
            memcpy(buf + size - sizeof(tail), &tail, sizeof(tail));
            sge = svt_sge(buf, size, mr);
            TH_ASSERT_EQ(svt_post(ep.qp, IBV_WR_RDMA_WRITE, &sge, 1,
                                  peer.addr + off, peer.rkey, i,
                                  IBV_SEND_SIGNALED), 0);
            svt_poll(ep.scq, &wc, 30);
            TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
            th_oob_recv(oob, 1, &go, 1);
        } else {
            /* as a ring does: the head first, then the tail */
            deadline = th_time() + 30.0;
            while ((*(volatile uint64_t*)(buf + off) != tail) ||
                   (*(volatile uint64_t*)(buf + off + size - sizeof(tail)) !=
                    tail)) {
                if (th_time() > deadline) {
                    TH_FAIL("write %u did not land in 30 s", i);
                }
            }
            for (j = off + sizeof(tail); j < off + size - sizeof(tail); ++j) {
                if (((volatile uint8_t*)buf)[j] != value) {
                    first_bad = bad ? first_bad : i;
                    ++bad;
                    break;
                }
            }
            /* cleared by this core, as an eager RDMA target clears what it
             * took: the next write finds every line cached here */
            memset(buf + off, 0, size);
            th_oob_send(oob, 0, &go, 1);
        }
    }

    if (rank == 1) {
        th_log("%zu of %u writes had bytes missing when their tail was "
               "there (first: write %zu)", bad, TAIL_WRITES, first_bad);
        TH_ASSERT_EQ(bad, 0);
    }
    th_oob_barrier(oob);
    TH_ASSERT_EQ(ibv_dereg_mr(mr), 0);
    svt_ep_close(&ep);
    free(buf);
}

SVT_TEST_HOSTS(write_tail_lands_last)
{
    svt_need_device();
    th_run_procs(2, tail_rank, NULL);
}

/* ---------------------------------------------------------------------- */

static void ud_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    struct ibv_qp_attr a;
    svt_info_t mine, peer;
    struct ibv_send_wr wr, *bad;
    struct ibv_ah_attr aa;
    struct ibv_sge sge;
    struct ibv_ah *ah;
    struct ibv_mr *mr;
    struct ibv_wc wc;
    uint8_t *buf;
    svt_ep_t ep;
    int i;

    (void)nprocs; (void)arg;
    svt_ep_open(&ep, IBV_QPT_UD, 0, 0);
    buf = aligned_alloc(4096, 65536);
    mr  = ibv_reg_mr(ep.pd, buf, 65536, IBV_ACCESS_LOCAL_WRITE);
    TH_ASSERT(mr != NULL);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey     = 0x11111111;
    TH_ASSERT_EQ(ibv_modify_qp(ep.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                               IBV_QP_PORT | IBV_QP_QKEY), 0);
    a.qp_state = IBV_QPS_RTR;
    TH_ASSERT_EQ(ibv_modify_qp(ep.qp, &a, IBV_QP_STATE), 0);
    a.qp_state = IBV_QPS_RTS;
    TH_ASSERT_EQ(ibv_modify_qp(ep.qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
    mine = svt_info(&ep, mr);
    svt_exchange(oob, !rank, &mine, &peer);

    if (rank == 1) {
        for (i = 0; i < 4; ++i) {
            svt_post_recv(ep.qp, buf + i * 8192, 4096 + 40, mr->lkey, i);
        }
        th_oob_barrier(oob);
        th_oob_barrier(oob);
        svt_poll(ep.rcq, &wc, 10);
        TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        TH_ASSERT_EQ(wc.byte_len, 1000 + 40);
        TH_ASSERT_EQ(wc.src_qp, peer.qpn);
        TH_CHECK_PATTERN(buf + 40, 1000, 11);
        /* the datagram with the wrong qkey was dropped */
        svt_poll(ep.rcq, &wc, 10);
        TH_ASSERT_EQ(wc.wr_id, 1);
        TH_ASSERT_EQ(wc.byte_len, 4096 + 40);
        TH_ASSERT(wc.wc_flags & IBV_WC_WITH_IMM);
        TH_CHECK_PATTERN(buf + 8192 + 40, 4096, 13);
        TH_ASSERT_EQ(ibv_poll_cq(ep.rcq, 1, &wc), 0);
    } else {
        memset(&aa, 0, sizeof(aa));
        aa.dlid     = peer.lid;
        aa.port_num = 1;
        ah = ibv_create_ah(ep.pd, &aa);
        TH_ASSERT(ah != NULL);
        th_oob_barrier(oob);
        for (i = 0; i < 3; ++i) {
            uint32_t len = (i == 2) ? 4096 : 1000;

            th_fill_pattern(buf + i * 8192, len, 11 + i);
            sge = svt_sge(buf + i * 8192, len, mr);
            memset(&wr, 0, sizeof(wr));
            wr.wr_id       = i;
            wr.opcode      = i == 2 ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
            wr.sg_list     = &sge;
            wr.num_sge     = 1;
            wr.send_flags  = IBV_SEND_SIGNALED;
            wr.wr.ud.ah    = ah;
            wr.wr.ud.remote_qpn  = peer.qpn;
            wr.wr.ud.remote_qkey = (i == 1) ? 0x222 : 0x11111111;
            TH_ASSERT_EQ(ibv_post_send(ep.qp, &wr, &bad), 0);
            svt_poll(ep.scq, &wc, 10);
            TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        }
        /* larger than the MTU: local length error */
        sge = svt_sge(buf, 8192, mr);
        wr.sg_list = &sge;
        wr.wr_id   = 9;
        TH_ASSERT_EQ(ibv_post_send(ep.qp, &wr, &bad), 0);
        svt_poll(ep.scq, &wc, 10);
        TH_ASSERT_EQ(wc.status, IBV_WC_LOC_LEN_ERR);
        th_oob_barrier(oob);
        ibv_destroy_ah(ah);
    }
    th_oob_barrier(oob);
    ibv_dereg_mr(mr);
    svt_ep_close(&ep);
    free(buf);
}

SVT_TEST_HOSTS(ud_send_recv)
{
    svt_need_device();
    th_run_procs(2, ud_rank, NULL);
}

/* ---------------------------------------------------------------------- */

static void channel_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    svt_info_t mine, peer;
    struct ibv_cq *ev_cq;
    struct ibv_sge sge;
    struct pollfd pfd;
    struct ibv_mr *mr;
    struct ibv_wc wc;
    void *ev_ctx;
    uint8_t *buf;
    svt_ep_t ep;

    (void)nprocs; (void)arg;
    svt_ep_open(&ep, IBV_QPT_RC, 0, 1);
    buf = aligned_alloc(4096, 4096);
    mr  = ibv_reg_mr(ep.pd, buf, 4096, SVT_ALL_ACCESS);
    TH_ASSERT(mr != NULL);
    mine = svt_info(&ep, mr);
    svt_exchange(oob, !rank, &mine, &peer);
    svt_rc_connect(&ep, &peer);
    if (rank == 1) {
        svt_post_recv(ep.qp, buf, 4096, mr->lkey, 5);
        TH_ASSERT_EQ(ibv_req_notify_cq(ep.rcq, 0), 0);
        pfd.fd     = ep.ch->fd;
        pfd.events = POLLIN;
        TH_ASSERT_EQ(poll(&pfd, 1, 0), 0);
        th_oob_barrier(oob);
        /* the fd becomes readable when the remote SEND completes here */
        TH_ASSERT_EQ(poll(&pfd, 1, 10000), 1);
        TH_ASSERT_EQ(ibv_get_cq_event(ep.ch, &ev_cq, &ev_ctx), 0);
        TH_ASSERT(ev_cq == ep.rcq);
        ibv_ack_cq_events(ev_cq, 1);
        TH_ASSERT_EQ(ibv_poll_cq(ep.rcq, 1, &wc), 1);
        TH_ASSERT_EQ(wc.wr_id, 5);
    } else {
        th_oob_barrier(oob);
        usleep(20000);
        sge = svt_sge(buf, 16, mr);
        TH_ASSERT_EQ(svt_post(ep.qp, IBV_WR_SEND, &sge, 1, 0, 0, 1,
                              IBV_SEND_SIGNALED), 0);
        svt_poll(ep.scq, &wc, 10);
        TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    }
    th_oob_barrier(oob);
    ibv_dereg_mr(mr);
    svt_ep_close(&ep);
    free(buf);
}

SVT_TEST_HOSTS(comp_channel)
{
    svt_need_device();
    th_run_procs(2, channel_rank, NULL);
}

/* ---------------------------------------------------------------------- */

#define SCALE_N 8

static void scale_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    svt_ep_t ep[SCALE_N];
    svt_info_t mine, peer[SCALE_N];
    struct ibv_mr *mr;
    struct ibv_sge sge;
    struct ibv_wc wc;
    uint8_t *buf;
    int p, got;

    (void)arg;
    buf = aligned_alloc(4096, SCALE_N * 4096 * 2);
    memset(buf, 0, SCALE_N * 4096 * 2);
    for (p = 0; p < nprocs; ++p) {
        if (p == rank) {
            continue;
        }
        svt_ep_open(&ep[p], IBV_QPT_RC, 0, 0);
        mr = ibv_reg_mr(ep[p].pd, buf, SCALE_N * 4096 * 2, SVT_ALL_ACCESS);
        TH_ASSERT(mr != NULL);
        mine = svt_info(&ep[p], mr);
        ep[p].qp->qp_context = mr;
        svt_exchange(oob, p, &mine, &peer[p]);
        svt_rc_connect(&ep[p], &peer[p]);
        svt_post_recv(ep[p].qp, buf + SCALE_N * 4096 + p * 4096, 4096,
                      mr->lkey, p);
    }
    th_fill_pattern(buf + rank * 4096, 4096, rank);
    th_oob_barrier(oob);
    for (p = 0; p < nprocs; ++p) {
        if (p == rank) {
            continue;
        }
        mr  = ep[p].qp->qp_context;
        sge = svt_sge(buf + rank * 4096, 4096, mr);
        TH_ASSERT_EQ(svt_post(ep[p].qp, IBV_WR_RDMA_WRITE, &sge, 1,
                              peer[p].addr + rank * 4096, peer[p].rkey, 1, 0),
                     0);
        TH_ASSERT_EQ(svt_post(ep[p].qp, IBV_WR_SEND, &sge, 1, 0, 0, 2,
                              IBV_SEND_SIGNALED), 0);
    }
    for (p = 0, got = 0; p < nprocs; ++p) {
        if (p == rank) {
            continue;
        }
        svt_poll(ep[p].scq, &wc, 30);
        TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        svt_poll(ep[p].rcq, &wc, 30);
        TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        TH_CHECK_PATTERN(buf + p * 4096, 4096, p);
        TH_CHECK_PATTERN(buf + SCALE_N * 4096 + p * 4096, 4096, p);
        ++got;
    }
    TH_ASSERT_EQ(got, nprocs - 1);
    th_oob_barrier(oob);
    for (p = 0; p < nprocs; ++p) {
        if (p != rank) {
            ibv_dereg_mr(ep[p].qp->qp_context);
            svt_ep_close(&ep[p]);
        }
    }
    free(buf);
}

SVT_TEST_HOSTS(eight_processes)
{
    svt_need_device();
    th_run_procs(SCALE_N, scale_rank, NULL);
}

/* ---------------------------------------------------------------------- */

static void srq_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    struct ibv_recv_wr rwr, *rbad;
    svt_info_t mine, peer;
    struct ibv_sge sge;
    struct ibv_mr *mr;
    struct ibv_wc wc;
    uint8_t *buf;
    svt_ep_t ep;
    int i;

    (void)nprocs; (void)arg;
    svt_ep_open(&ep, IBV_QPT_RC, rank == 1, 0);
    buf = aligned_alloc(4096, 8 * 4096);
    memset(buf, 0, 8 * 4096);
    mr = ibv_reg_mr(ep.pd, buf, 8 * 4096, SVT_ALL_ACCESS);
    TH_ASSERT(mr != NULL);
    mine = svt_info(&ep, mr);
    svt_exchange(oob, !rank, &mine, &peer);
    svt_rc_connect(&ep, &peer);
    if (rank == 1) {
        /* posting to the QP's own receive queue is invalid with an SRQ */
        sge = svt_sge(buf, 4096, mr);
        memset(&rwr, 0, sizeof(rwr));
        rwr.sg_list = &sge;
        rwr.num_sge = 1;
        TH_ASSERT_NE(ibv_post_recv(ep.qp, &rwr, &rbad), 0);
        for (i = 0; i < 4; ++i) {
            sge = svt_sge(buf + i * 4096, 4096, mr);
            rwr.wr_id = 50 + i;
            TH_ASSERT_EQ(ibv_post_srq_recv(ep.srq, &rwr, &rbad), 0);
        }
        th_oob_barrier(oob);
        for (i = 0; i < 4; ++i) {
            svt_poll(ep.rcq, &wc, 10);
            TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
            TH_ASSERT_EQ(wc.wr_id, 50 + i);
            TH_ASSERT_EQ(wc.qp_num, ep.qp->qp_num);
            TH_ASSERT_EQ(wc.byte_len, 100 * (i + 1));
            TH_CHECK_PATTERN(buf + i * 4096, 100 * (i + 1), i);
        }
    } else {
        th_oob_barrier(oob);
        for (i = 0; i < 4; ++i) {
            th_fill_pattern(buf + i * 4096, 100 * (i + 1), i);
            sge = svt_sge(buf + i * 4096, 100 * (i + 1), mr);
            TH_ASSERT_EQ(svt_post(ep.qp, IBV_WR_SEND, &sge, 1, 0, 0, i,
                                  IBV_SEND_SIGNALED), 0);
        }
        for (i = 0; i < 4; ++i) {
            svt_poll(ep.scq, &wc, 10);
            TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
            TH_ASSERT_EQ(wc.wr_id, i);
        }
    }
    th_oob_barrier(oob);
    ibv_dereg_mr(mr);
    svt_ep_close(&ep);
    free(buf);
}

SVT_TEST_HOSTS(srq_recv)
{
    svt_need_device();
    th_run_procs(2, srq_rank, NULL);
}

/* ---------------------------------------------------------------------- */

#define MANY_QPS 256

/* many QPs in one process: 2 x 256 connected in pairs, one CQ */
TH_TEST(softverbs, many_qps)
{
    struct ibv_qp *qp[2 * MANY_QPS];
    struct ibv_device **list;
    struct ibv_qp_init_attr qa;
    struct ibv_context *ctx;
    svt_info_t info[2];
    struct ibv_sge sge;
    struct ibv_mr *mr;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_wc wc;
    uint64_t *buf;
    svt_ep_t tmp;
    int i, n;

    svt_need_device();
    list = ibv_get_device_list(&n);
    ctx  = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    pd  = ibv_alloc_pd(ctx);
    cq  = ibv_create_cq(ctx, 4 * MANY_QPS, NULL, NULL, 0);
    buf = calloc(4 * MANY_QPS, sizeof(*buf));
    mr  = ibv_reg_mr(pd, buf, 4 * MANY_QPS * sizeof(*buf), SVT_ALL_ACCESS);
    TH_ASSERT(ctx && pd && cq && buf && mr);
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = qa.recv_cq = cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    for (i = 0; i < 2 * MANY_QPS; ++i) {
        qp[i] = ibv_create_qp(pd, &qa);
        TH_ASSERT(qp[i] != NULL);
        TH_ASSERT(i == 0 || qp[i]->qp_num != qp[i - 1]->qp_num);
    }
    memset(&tmp, 0, sizeof(tmp));
    tmp.ctx = ctx;
    for (i = 0; i < 2 * MANY_QPS; ++i) {
        tmp.qp  = qp[i ^ 1];
        info[0] = svt_info(&tmp, NULL);
        tmp.qp  = qp[i];
        svt_rc_connect(&tmp, &info[0]);
    }
    for (i = 0; i < 2 * MANY_QPS; ++i) {
        buf[i] = 1000 + i;
        sge    = svt_sge(&buf[i], 8, mr);
        TH_ASSERT_EQ(svt_post(qp[i], IBV_WR_RDMA_WRITE, &sge, 1,
                              (uintptr_t)&buf[2 * MANY_QPS + i], mr->rkey,
                              i, IBV_SEND_SIGNALED), 0);
    }
    for (i = 0; i < 2 * MANY_QPS; ++i) {
        svt_poll(cq, &wc, 10);
        TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    }
    for (i = 0; i < 2 * MANY_QPS; ++i) {
        TH_ASSERT_EQ(buf[2 * MANY_QPS + i], 1000 + i);
        TH_ASSERT_EQ(ibv_destroy_qp(qp[i]), 0);
    }
    ibv_dereg_mr(mr);
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    free(buf);
}

/* ---------------------------------------------------------------------- */

#define LOOPBACK_LEN (64 * 1024 + 1)

/* Two connected QPs of one process, with SOFTVERBS_LOOPBACK = arg: data
 * placed exactly by a write and a read; with the kernel's copy (the
 * default, so that a calibration's loopback costs what the fabric does) a
 * write into pages the process cannot write fails with an error completion,
 * where memcpy would have crashed the process */
static void loopback_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    const char *mode = arg;
    size_t page      = (size_t)sysconf(_SC_PAGESIZE);
    struct ibv_qp *qp[2];
    struct ibv_mr *mr, *ro_mr;
    struct ibv_qp_init_attr qa;
    svt_ep_t ep, tmp;
    svt_info_t info;
    struct ibv_sge sge;
    struct ibv_wc wc;
    uint8_t *buf, *ro;
    size_t i;

    setenv("SOFTVERBS_LOOPBACK", mode, 1);
    svt_ep_open(&ep, IBV_QPT_RC, 0, 0);
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = qa.recv_cq = ep.scq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    qp[0] = ep.qp;
    qp[1] = ibv_create_qp(ep.pd, &qa);
    TH_ASSERT(qp[1] != NULL);
    memset(&tmp, 0, sizeof(tmp));
    tmp.ctx = ep.ctx;
    for (i = 0; i < 2; ++i) {
        tmp.qp = qp[i ^ 1];
        info   = svt_info(&tmp, NULL);
        tmp.qp = qp[i];
        svt_rc_connect(&tmp, &info);
    }

    buf = aligned_alloc(page, 4 * LOOPBACK_LEN);
    TH_ASSERT(buf != NULL);
    for (i = 0; i < 4 * LOOPBACK_LEN; ++i) {
        buf[i] = (uint8_t)(i * 7 + 1);
    }
    mr = ibv_reg_mr(ep.pd, buf, 4 * LOOPBACK_LEN, SVT_ALL_ACCESS);
    TH_ASSERT(mr != NULL);

    /* write at unaligned offsets, then read it back elsewhere */
    sge = svt_sge(buf + 1, LOOPBACK_LEN, mr);
    TH_ASSERT_EQ(svt_post(qp[0], IBV_WR_RDMA_WRITE, &sge, 1,
                          (uintptr_t)buf + LOOPBACK_LEN + 3, mr->rkey, 1,
                          IBV_SEND_SIGNALED), 0);
    svt_poll(ep.scq, &wc, 10);
    TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    TH_ASSERT(!memcmp(buf + LOOPBACK_LEN + 3, buf + 1, LOOPBACK_LEN));
    sge = svt_sge(buf + 2 * LOOPBACK_LEN + 5, LOOPBACK_LEN, mr);
    TH_ASSERT_EQ(svt_post(qp[1], IBV_WR_RDMA_READ, &sge, 1,
                          (uintptr_t)buf + LOOPBACK_LEN + 3, mr->rkey, 2,
                          IBV_SEND_SIGNALED), 0);
    svt_poll(ep.scq, &wc, 10);
    TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    TH_ASSERT(!memcmp(buf + 2 * LOOPBACK_LEN + 5, buf + 1, LOOPBACK_LEN));

    if (!strcmp(mode, "kernel")) {
        ro = aligned_alloc(page, page);
        TH_ASSERT(ro != NULL);
        memset(ro, 0x5a, page);
        ro_mr = ibv_reg_mr(ep.pd, ro, page, SVT_ALL_ACCESS);
        TH_ASSERT(ro_mr != NULL);
        TH_ASSERT_EQ(mprotect(ro, page, PROT_READ), 0);
        sge = svt_sge(buf, 64, mr);
        TH_ASSERT_EQ(svt_post(qp[0], IBV_WR_RDMA_WRITE, &sge, 1,
                              (uintptr_t)ro, ro_mr->rkey, 3,
                              IBV_SEND_SIGNALED), 0);
        svt_poll(ep.scq, &wc, 10);
        TH_ASSERT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
        TH_ASSERT_EQ(ro[0], 0x5a);
    }
}

TH_TEST(softverbs, loopback_modes)
{
    svt_need_device();
    th_run_procs(1, loopback_rank, "kernel");
    th_run_procs(1, loopback_rank, "memcpy");
}

/* ---------------------------------------------------------------------- */

#define ATOMIC_PROCS 4
#define ATOMIC_ITERS 2000

/* ranks 1..3 fetch-add on rank 0's counter concurrently: no update lost */
static void atomic_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    struct ibv_send_wr wr, *bad;
    svt_info_t mine, peer;
    struct ibv_sge sge;
    struct ibv_mr *mr;
    struct ibv_wc wc;
    uint64_t *buf;
    svt_ep_t ep[ATOMIC_PROCS];
    int p, i;

    (void)arg;
    buf = aligned_alloc(4096, 4096);
    memset(buf, 0, 4096);
    for (p = 0; p < nprocs; ++p) {
        if ((rank == 0) == (p == 0)) {
            continue;   /* rank 0 talks to everyone, the others to rank 0 */
        }
        svt_ep_open(&ep[p], IBV_QPT_RC, 0, 0);
        mr = ibv_reg_mr(ep[p].pd, buf, 4096, SVT_ALL_ACCESS);
        TH_ASSERT(mr != NULL);
        ep[p].qp->qp_context = mr;
        mine = svt_info(&ep[p], mr);
        svt_exchange(oob, p, &mine, &peer);
        svt_rc_connect(&ep[p], &peer);
    }
    th_oob_barrier(oob);
    if (rank != 0) {
        mr = ep[0].qp->qp_context;
        for (i = 0; i < ATOMIC_ITERS; ++i) {
            sge = svt_sge(&buf[1], 8, mr);
            memset(&wr, 0, sizeof(wr));
            wr.opcode     = IBV_WR_ATOMIC_FETCH_AND_ADD;
            wr.sg_list    = &sge;
            wr.num_sge    = 1;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.wr.atomic.remote_addr = peer.addr;
            wr.wr.atomic.rkey        = peer.rkey;
            wr.wr.atomic.compare_add = 1;
            TH_ASSERT_EQ(ibv_post_send(ep[0].qp, &wr, &bad), 0);
            svt_poll(ep[0].scq, &wc, 10);
            TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
            TH_ASSERT_LT(buf[1], (uint64_t)(nprocs - 1) * ATOMIC_ITERS);
        }
    }
    th_oob_barrier(oob);
    if (rank == 0) {
        TH_ASSERT_EQ(buf[0], (uint64_t)(nprocs - 1) * ATOMIC_ITERS);
    }
    for (p = 0; p < nprocs; ++p) {
        if ((rank == 0) != (p == 0)) {
            ibv_dereg_mr(ep[p].qp->qp_context);
            svt_ep_close(&ep[p]);
        }
    }
    free(buf);
}

SVT_TEST_HOSTS(atomic_concurrent)
{
    svt_need_device();
    th_run_procs(ATOMIC_PROCS, atomic_rank, NULL);
}

/* ---------------------------------------------------------------------- */

/* a SEND gathered from 3 SGEs scattered into 4 receive SGEs, unaligned */
static void scatter_rank(th_oob_t *oob, int rank, int nprocs, void *arg)
{
    static const uint32_t slen[3] = { 1, 4097, 70000 };
    static const uint32_t rlen[4] = { 3, 5000, 13, 70000 };
    struct ibv_recv_wr rwr, *rbad;
    struct ibv_sge sge[4];
    svt_info_t mine, peer;
    struct ibv_mr *mr;
    struct ibv_wc wc;
    uint8_t *buf, *p, *expect;
    size_t total = 1 + 4097 + 70000, off;
    svt_ep_t ep;
    int i;

    (void)nprocs; (void)arg;
    svt_ep_open(&ep, IBV_QPT_RC, 0, 0);
    buf = aligned_alloc(4096, 1 << 20);
    memset(buf, 0, 1 << 20);
    mr = ibv_reg_mr(ep.pd, buf, 1 << 20, SVT_ALL_ACCESS);
    TH_ASSERT(mr != NULL);
    mine = svt_info(&ep, mr);
    svt_exchange(oob, !rank, &mine, &peer);
    svt_rc_connect(&ep, &peer);
    if (rank == 1) {
        for (i = 0, p = buf + 1; i < 4; ++i) {
            sge[i] = svt_sge(p, rlen[i], mr);
            p += rlen[i] + 17;
        }
        memset(&rwr, 0, sizeof(rwr));
        rwr.sg_list = sge;
        rwr.num_sge = 4;
        TH_ASSERT_EQ(ibv_post_recv(ep.qp, &rwr, &rbad), 0);
        th_oob_barrier(oob);
        svt_poll(ep.rcq, &wc, 10);
        TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        TH_ASSERT_EQ(wc.byte_len, total);
        expect = malloc(total);
        th_fill_pattern(expect, total, 99);
        for (i = 0, off = 0; i < 4 && off < total; ++i) {
            size_t n = total - off < rlen[i] ? total - off : rlen[i];

            TH_ASSERT_MEM_EQ((uint8_t *)(uintptr_t)sge[i].addr, expect + off,
                             n);
            off += n;
        }
        free(expect);
    } else {
        expect = malloc(total);
        th_fill_pattern(expect, total, 99);
        for (i = 0, p = buf + 5, off = 0; i < 3; ++i) {
            memcpy(p, expect + off, slen[i]);
            sge[i] = svt_sge(p, slen[i], mr);
            off += slen[i];
            p   += slen[i] + 33;
        }
        free(expect);
        th_oob_barrier(oob);
        TH_ASSERT_EQ(svt_post(ep.qp, IBV_WR_SEND, sge, 3, 0, 0, 1,
                              IBV_SEND_SIGNALED), 0);
        svt_poll(ep.scq, &wc, 10);
        TH_ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    }
    th_oob_barrier(oob);
    ibv_dereg_mr(mr);
    svt_ep_close(&ep);
    free(buf);
}

SVT_TEST_HOSTS(sge_gather_scatter)
{
    svt_need_device();
    th_run_procs(2, scatter_rank, NULL);
}

/* the strings are rdma-core's, indexed by the enum (IBV_NODE_CA is 1) */
TH_TEST(softverbs, node_type_str)
{
    TH_ASSERT_STR_EQ(ibv_node_type_str(IBV_NODE_CA),
                     "InfiniBand channel adapter");
    TH_ASSERT_STR_EQ(ibv_node_type_str(IBV_NODE_SWITCH), "InfiniBand switch");
    TH_ASSERT_STR_EQ(ibv_node_type_str(IBV_NODE_UNKNOWN), "unknown");
    TH_ASSERT_STR_EQ(ibv_node_type_str((enum ibv_node_type)100), "unknown");
}
