// MAD layouts against the IBTA tables: known bytes at known offsets, and round trips.
#include "cm/mad.h"

#include <gtest/gtest.h>

#include <array>
#include <string>

#include "cm/ip_cm.h"

namespace uroce::cm {
namespace {

const uint8_t* msg_of(const Mad& m) {
  return m.data() + kMadHeaderBytes;
}

TEST(Field, ReadsAndWritesBigEndianBitFields) {
  uint8_t b[8] = {};
  Field{0, 24, 8}.set(b, 0xabcdef);  // a QPN in the high 24 bits of a word
  EXPECT_EQ(b[0], 0xab);
  EXPECT_EQ(b[1], 0xcd);
  EXPECT_EQ(b[2], 0xef);
  EXPECT_EQ(b[3], 0);
  Field{3, 8, 0}.set(b, 0x5a);  // the byte after it is untouched by the QPN
  EXPECT_EQ((Field{0, 24, 8}.get(b)), 0xabcdefu);
  Field{4, 5, 3}.set(b, 0x1f);
  Field{4, 3, 0}.set(b, 0x2);
  EXPECT_EQ(b[4], 0xfa);
  Field{4, 3, 0}.set(b, 0xff);  // masked to 3 bits
  EXPECT_EQ(b[4], 0xff);
  EXPECT_EQ((Field{4, 5, 3}.get(b)), 0x1fu);
}

TEST(MadHeader, CmClassSendMethod) {
  Rtu r;
  r.local_comm_id = 1;
  Mad m;
  ASSERT_TRUE(encode(r, 0x0102030405060708ull, m));
  EXPECT_EQ(m[0], 1);     // base version
  EXPECT_EQ(m[1], 0x07);  // CM class
  EXPECT_EQ(m[2], 2);     // class version
  EXPECT_EQ(m[3], 0x03);  // Send
  EXPECT_EQ(m[8], 0x01);  // TID, big-endian
  EXPECT_EQ(m[15], 0x08);
  EXPECT_EQ(m[16], 0x00);  // attribute ID 0x0014
  EXPECT_EQ(m[17], 0x14);
  MadHeader h;
  ASSERT_TRUE(parse_header(m, &h));
  EXPECT_EQ(h.tid, 0x0102030405060708ull);
  EXPECT_EQ(h.attr_id, 0x14);
  m[2] = 1;  // another class version is not ours
  EXPECT_FALSE(parse_header(m, &h));
  EXPECT_FALSE(parse_header(std::span<const uint8_t>(m.data(), 255), &h));
}

TEST(Req, IbtaOffsets) {
  Req r;
  r.local_comm_id = 0x11223344;
  r.service_id = 0x0000000001064e20ull;  // TCP port 20000
  r.local_ca_guid = 0x0200000afffe0001ull;
  r.local_qkey = 0;
  r.local_qpn = 0x000123;
  r.responder_resources = 4;
  r.initiator_depth = 3;
  r.remote_cm_response_timeout = 20;
  r.transport_service_type = 0;
  r.end_to_end_flow_control = true;
  r.starting_psn = 0xabcdef;
  r.local_cm_response_timeout = 18;
  r.retry_count = 7;
  r.pkey = 0xffff;
  r.path_mtu = 3;  // 1024
  r.rnr_retry_count = 6;
  r.max_cm_retries = 15;
  r.srq = true;
  r.primary.local_gid[15] = 0x0a;
  r.primary.remote_gid[15] = 0x0b;
  r.primary.flow_label = 0xfffff;
  r.primary.packet_rate = 0x3f;
  r.primary.traffic_class = 0x12;
  r.primary.hop_limit = 64;
  r.primary.sl = 5;
  r.primary.local_ack_timeout = 14;
  r.private_data.assign(92, 0xee);
  Mad m;
  ASSERT_TRUE(encode(r, 7, m));
  const uint8_t* p = msg_of(m);
  EXPECT_EQ(m[17], 0x10);
  EXPECT_EQ(p[0], 0x11);
  EXPECT_EQ(p[3], 0x44);
  EXPECT_EQ(p[13], 0x06);  // service ID bytes 8..15: 00 00 00 01 06 4e 20
  EXPECT_EQ(p[12], 0x01);
  EXPECT_EQ(p[34], 0x23);  // local QPN, bytes 32..34
  EXPECT_EQ(p[35], 4);     // responder resources
  EXPECT_EQ(p[39], 3);     // initiator depth
  EXPECT_EQ(p[43], (20 << 3) | (0 << 1) | 1);
  EXPECT_EQ(p[44], 0xab);
  EXPECT_EQ(p[46], 0xef);
  EXPECT_EQ(p[47], (18 << 3) | 7);
  EXPECT_EQ(p[48], 0xff);
  EXPECT_EQ(p[50], (3 << 4) | 6);
  EXPECT_EQ(p[51], (15 << 4) | (1 << 3));
  EXPECT_EQ(p[52], 0xff);  // primary local LID: permissive
  EXPECT_EQ(p[71], 0x0a);  // local GID 56..71
  EXPECT_EQ(p[87], 0x0b);  // remote GID 72..87
  EXPECT_EQ(p[88], 0xff);
  EXPECT_EQ(p[90], 0xf0);  // 20-bit flow label, 6 reserved bits, 6-bit rate
  EXPECT_EQ(p[91], 0x3f);
  EXPECT_EQ(p[92], 0x12);
  EXPECT_EQ(p[93], 64);
  EXPECT_EQ(p[94], 5 << 4);
  EXPECT_EQ(p[95], 14 << 3);
  for (int i = 96; i < 140; ++i) EXPECT_EQ(p[i], 0) << "alternate path byte " << i;
  EXPECT_EQ(p[140], 0xee);
  EXPECT_EQ(p[231], 0xee);

  Req d = decode_req(p);
  EXPECT_EQ(d.local_comm_id, r.local_comm_id);
  EXPECT_EQ(d.service_id, r.service_id);
  EXPECT_EQ(d.local_ca_guid, r.local_ca_guid);
  EXPECT_EQ(d.local_qpn, r.local_qpn);
  EXPECT_EQ(d.responder_resources, 4);
  EXPECT_EQ(d.initiator_depth, 3);
  EXPECT_EQ(d.remote_cm_response_timeout, 20);
  EXPECT_TRUE(d.end_to_end_flow_control);
  EXPECT_EQ(d.starting_psn, 0xabcdefu);
  EXPECT_EQ(d.local_cm_response_timeout, 18);
  EXPECT_EQ(d.retry_count, 7);
  EXPECT_EQ(d.path_mtu, 3);
  EXPECT_EQ(d.rnr_retry_count, 6);
  EXPECT_EQ(d.max_cm_retries, 15);
  EXPECT_TRUE(d.srq);
  EXPECT_EQ(d.primary.flow_label, 0xfffffu);
  EXPECT_EQ(d.primary.packet_rate, 0x3f);
  EXPECT_EQ(d.primary.sl, 5);
  EXPECT_EQ(d.primary.local_ack_timeout, 14);
  EXPECT_EQ(d.primary.remote_gid, r.primary.remote_gid);
  EXPECT_EQ(d.private_data, r.private_data);

  r.private_data.assign(93, 0);  // one byte too many
  EXPECT_FALSE(encode(r, 7, m));
}

TEST(Rep, IbtaOffsets) {
  Rep r;
  r.local_comm_id = 0x01020304;
  r.remote_comm_id = 0x05060708;
  r.local_qkey = 0x11111111;
  r.local_qpn = 0x456789;
  r.starting_psn = 0x123456;
  r.responder_resources = 16;
  r.initiator_depth = 8;
  r.target_ack_delay = 0x1f;
  r.failover_accepted = 1;
  r.end_to_end_flow_control = true;
  r.rnr_retry_count = 7;
  r.srq = true;
  r.local_ca_guid = 0x1122334455667788ull;
  r.private_data = {1, 2, 3};
  Mad m;
  ASSERT_TRUE(encode(r, 1, m));
  const uint8_t* p = msg_of(m);
  EXPECT_EQ(m[17], 0x13);
  EXPECT_EQ(p[7], 0x08);
  EXPECT_EQ(p[12], 0x45);
  EXPECT_EQ(p[15], 0);
  EXPECT_EQ(p[20], 0x12);
  EXPECT_EQ(p[24], 16);
  EXPECT_EQ(p[25], 8);
  EXPECT_EQ(p[26], (0x1f << 3) | (1 << 1) | 1);
  EXPECT_EQ(p[27], (7 << 5) | (1 << 4));
  EXPECT_EQ(p[28], 0x11);
  EXPECT_EQ(p[35], 0x88);
  EXPECT_EQ(p[36], 1);
  Rep d = decode_rep(p);
  EXPECT_EQ(d.local_qpn, r.local_qpn);
  EXPECT_EQ(d.starting_psn, r.starting_psn);
  EXPECT_EQ(d.rnr_retry_count, 7);
  EXPECT_TRUE(d.srq);
  EXPECT_EQ(d.local_ca_guid, r.local_ca_guid);
  EXPECT_EQ(d.private_data.size(), 196u);  // the whole field, as the kernel reports it
  EXPECT_EQ(d.private_data[2], 3);
}

TEST(Rej, ReasonAriAndPrivateData) {
  Rej r;
  r.local_comm_id = 0;
  r.remote_comm_id = 42;
  r.message_rejected = MsgRef::kRep;
  r.reason = static_cast<uint16_t>(RejReason::kInvalidServiceId);
  r.ari = {9, 9};
  r.private_data = {0x77};
  Mad m;
  ASSERT_TRUE(encode(r, 1, m));
  const uint8_t* p = msg_of(m);
  EXPECT_EQ(m[17], 0x12);
  EXPECT_EQ(p[7], 42);
  EXPECT_EQ(p[8], 1 << 6);
  EXPECT_EQ(p[9], 2 << 1);
  EXPECT_EQ(p[11], 8);
  EXPECT_EQ(p[12], 9);
  EXPECT_EQ(p[84], 0x77);
  Rej d = decode_rej(p);
  EXPECT_EQ(d.reason, 8);
  EXPECT_EQ(d.message_rejected, MsgRef::kRep);
  EXPECT_EQ(d.ari, r.ari);
  EXPECT_EQ(d.private_data.size(), 148u);
}

TEST(SmallMessages, MraRtuDreqDrep) {
  Mad m;
  Mra mra;
  mra.local_comm_id = 1;
  mra.remote_comm_id = 2;
  mra.message_mraed = MsgRef::kRep;
  mra.service_timeout = 21;
  ASSERT_TRUE(encode(mra, 1, m));
  EXPECT_EQ(m[17], 0x11);
  EXPECT_EQ(msg_of(m)[8], 1 << 6);
  EXPECT_EQ(msg_of(m)[9], 21 << 3);
  EXPECT_EQ(decode_mra(msg_of(m)).service_timeout, 21);
  EXPECT_EQ(decode_mra(msg_of(m)).private_data.size(), 222u);

  Dreq dq;
  dq.local_comm_id = 3;
  dq.remote_comm_id = 4;
  dq.remote_qpn = 0xfedcba;
  ASSERT_TRUE(encode(dq, 1, m));
  EXPECT_EQ(m[17], 0x15);
  EXPECT_EQ(msg_of(m)[8], 0xfe);
  EXPECT_EQ(msg_of(m)[11], 0);
  EXPECT_EQ(decode_dreq(msg_of(m)).remote_qpn, 0xfedcbau);
  EXPECT_EQ(decode_dreq(msg_of(m)).private_data.size(), 220u);

  Drep dp;
  dp.local_comm_id = 5;
  ASSERT_TRUE(encode(dp, 1, m));
  EXPECT_EQ(m[17], 0x16);
  EXPECT_EQ(decode_drep(msg_of(m)).local_comm_id, 5u);

  Rtu rtu;
  rtu.private_data.assign(225, 0);
  EXPECT_FALSE(encode(rtu, 1, m));
}

TEST(Sidr, RequestAndReply) {
  Mad m;
  SidrReq q;
  q.request_id = 0xdeadbeef;
  q.pkey = 0xffff;
  q.service_id = service_id(kPsUdp, 7174);
  ASSERT_TRUE(encode(q, 1, m));
  EXPECT_EQ(m[17], 0x17);
  const uint8_t* p = msg_of(m);
  EXPECT_EQ(p[0], 0xde);
  EXPECT_EQ(p[4], 0xff);
  EXPECT_EQ(p[12], 0x01);
  EXPECT_EQ(p[13], 0x11);
  EXPECT_EQ(decode_sidr_req(p).service_id, q.service_id);

  SidrRep r;
  r.request_id = 0xdeadbeef;
  r.status = SidrStatus::kQpValid;
  r.qpn = 0x000042;
  r.service_id = q.service_id;
  r.qkey = 0x01234567;
  r.private_data = {5};
  ASSERT_TRUE(encode(r, 1, m));
  p = msg_of(m);
  EXPECT_EQ(m[17], 0x18);
  EXPECT_EQ(p[4], 0);
  EXPECT_EQ(p[10], 0x42);
  EXPECT_EQ(p[20], 0x01);
  EXPECT_EQ(p[23], 0x67);
  EXPECT_EQ(p[96], 5);
  SidrRep d = decode_sidr_rep(p);
  EXPECT_EQ(d.qpn, 0x42u);
  EXPECT_EQ(d.qkey, 0x01234567u);
  EXPECT_EQ(d.service_id, q.service_id);
}

TEST(CmTimeout, PowersOfTwoOf4096ns) {
  EXPECT_EQ(cm_timeout_ns(0), 4096u);
  EXPECT_EQ(cm_timeout_ns(20), 4096ull << 20);  // ≈ 4.3 s
  EXPECT_EQ(cm_timeout_ns(40), 4096ull << 31);
}

TEST(IpCm, ServiceIdsOfAnnexA11) {
  EXPECT_EQ(service_id(kPsTcp, 7174), 0x0000000001061c06ull);
  EXPECT_EQ(service_id(kPsUdp, 1), 0x0000000001110001ull);
  EXPECT_TRUE(is_ip_service_id(service_id(kPsTcp, 1)));
  EXPECT_FALSE(is_ip_service_id(0x1000000000000001ull));
  EXPECT_EQ(service_port(0x0000000001061c06ull), 7174);
  EXPECT_EQ(service_port_space(0x0000000001061c06ull), kPsTcp);
}

TEST(IpCm, PrivateDataHeader) {
  IpCmHeader h;
  h.src_port = 0x1234;
  h.src = wire::IpAddr(0x7f000002u);
  h.dst = wire::IpAddr(0x7f000001u);
  const uint8_t user[] = {0xaa, 0xbb};
  auto pd = make_ip_private_data(h, user, req::kPrivateData.len);
  ASSERT_TRUE(pd);
  ASSERT_EQ(pd->size(), 38u);
  EXPECT_EQ((*pd)[0], 0x00);
  EXPECT_EQ((*pd)[1], 0x40);
  EXPECT_EQ((*pd)[2], 0x12);
  EXPECT_EQ((*pd)[3], 0x34);
  for (int i = 4; i < 16; ++i) EXPECT_EQ((*pd)[i], 0);
  EXPECT_EQ((*pd)[16], 0x7f);
  EXPECT_EQ((*pd)[19], 0x02);
  EXPECT_EQ((*pd)[35], 0x01);
  EXPECT_EQ((*pd)[36], 0xaa);
  auto back = parse_ip_private_data(*pd);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->src_port, 0x1234);
  EXPECT_EQ(back->ip_version, 4);
  EXPECT_EQ(back->src, h.src);
  EXPECT_EQ(back->dst, h.dst);

  std::vector<uint8_t> big(57, 0);  // 36 + 57 > 92
  EXPECT_FALSE(make_ip_private_data(h, big, req::kPrivateData.len));
  std::vector<uint8_t> v5 = *pd;
  v5[1] = 0x50;  // neither 4 nor 6
  EXPECT_FALSE(parse_ip_private_data(v5));
  std::vector<uint8_t> major1 = *pd;
  major1[0] = 0x10;
  EXPECT_FALSE(parse_ip_private_data(major1));
  EXPECT_FALSE(parse_ip_private_data(std::span<const uint8_t>(pd->data(), 35)));
  // An IPv6 address in a version 4 header is refused, not truncated.
  IpCmHeader mixed = h;
  mixed.dst = *wire::IpAddr::parse("fd00::1");
  EXPECT_FALSE(make_ip_private_data(mixed, user, req::kPrivateData.len));
}

// Annex A11.2.2 with IP version 6: the 16 bytes of each address as they are, in network order
// (the kernel's cma_format_hdr copies sin6_addr), the IP version 6 in the high nibble.
TEST(IpCm, PrivateDataHeaderIpv6) {
  IpCmHeader h;
  h.ip_version = 6;
  h.src_port = 0xc001;
  h.src = *wire::IpAddr::parse("fd00:c0::2");
  h.dst = *wire::IpAddr::parse("::1");
  const uint8_t user[] = {0x5a};
  auto pd = make_ip_private_data(h, user, sidr_req::kPrivateData.len);
  ASSERT_TRUE(pd);
  ASSERT_EQ(pd->size(), 37u);
  const std::vector<uint8_t> want = {
      0x00, 0x60, 0xc0, 0x01,                                         // ver, IPv6, port
      0xfd, 0x00, 0x00, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02,  // fd00:c0::2
      0,    0,    0,    0,    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,  // ::1
      0x5a};
  EXPECT_EQ(*pd, want);
  auto back = parse_ip_private_data(*pd);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->ip_version, 6);
  EXPECT_EQ(back->src_port, 0xc001);
  EXPECT_EQ(back->src, h.src);
  EXPECT_EQ(back->dst, h.dst);
  EXPECT_FALSE(back->src.is_v4());
  // An IPv4 address in a version 6 header is refused.
  IpCmHeader mixed = h;
  mixed.src = wire::IpAddr(0x0a000001u);
  EXPECT_FALSE(make_ip_private_data(mixed, user, req::kPrivateData.len));
  // 36 + 56 fits a REQ, 57 does not: the same budget as over IPv4.
  EXPECT_TRUE(make_ip_private_data(h, std::vector<uint8_t>(56, 0), req::kPrivateData.len));
  EXPECT_FALSE(make_ip_private_data(h, std::vector<uint8_t>(57, 0), req::kPrivateData.len));
}

// Known answers: every field of every message at a distinct value, and the bytes the encoders
// wrote for them when the field tables were first checked against the IBTA tables and rxe. They
// guard any rework of the encoders and decoders: a field moved, dropped or swapped shows here.
std::string hex_of(const Mad& m) {
  size_t end = m.size();
  while (end > 0 && m[end - 1] == 0) --end;
  std::string s;
  static const char* kDigits = "0123456789abcdef";
  for (size_t i = 0; i < end; ++i) {
    s += kDigits[m[i] >> 4];
    s += kDigits[m[i] & 15];
  }
  return s;
}

// The 232 message bytes 0x01, 0x02, … (wrapping, never 0): decoding them gives every field a
// value of its own.
std::array<uint8_t, kCmMessageBytes> counting_bytes() {
  std::array<uint8_t, kCmMessageBytes> b{};
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i % 255 + 1);
  return b;
}

TEST(KnownAnswer, EncodersWithDistinctFieldValues) {
  Mad m;
  Req rq;
  rq.local_comm_id = 0x01020304;
  rq.service_id = 0x0506070809101112ull;
  rq.local_ca_guid = 0x1314151617181920ull;
  rq.local_qkey = 0x21222324;
  rq.local_qpn = 0x252627;
  rq.responder_resources = 0x28;
  rq.initiator_depth = 0x29;
  rq.remote_cm_response_timeout = 0x1a;
  rq.transport_service_type = 2;
  rq.end_to_end_flow_control = true;
  rq.starting_psn = 0x303132;
  rq.local_cm_response_timeout = 0x13;
  rq.retry_count = 5;
  rq.pkey = 0x3334;
  rq.path_mtu = 0xa;
  rq.rnr_retry_count = 3;
  rq.max_cm_retries = 0xc;
  rq.srq = true;
  rq.primary.local_lid = 0x3536;
  rq.primary.remote_lid = 0x3738;
  for (uint8_t i = 0; i < 16; ++i) rq.primary.local_gid[i] = static_cast<uint8_t>(0x40 + i);
  for (uint8_t i = 0; i < 16; ++i) rq.primary.remote_gid[i] = static_cast<uint8_t>(0x50 + i);
  rq.primary.flow_label = 0xabcde;
  rq.primary.packet_rate = 0x2b;
  rq.primary.traffic_class = 0x61;
  rq.primary.hop_limit = 0x62;
  rq.primary.sl = 0xe;
  rq.primary.subnet_local = true;
  rq.primary.local_ack_timeout = 0x17;
  rq.private_data = {0x71, 0x72, 0x73};
  ASSERT_TRUE(encode(rq, 0x0102030405060708ull, m));
  EXPECT_EQ(hex_of(m),
            "01070203000000000102030405060708001000000000000001020304000000000506070809101112131415"
            "161718192000000000212223242526272800000029000000d53031329d3334a3c835363738404142434445"
            "464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5fabcde02b6162e8b8000000000000000000"
            "0000000000000000000000000000000000000000000000000000000000000000000000717273");

  Mra ma;
  ma.local_comm_id = 0x01020304;
  ma.remote_comm_id = 0x05060708;
  ma.message_mraed = MsgRef::kOther;
  ma.service_timeout = 0x15;
  ma.private_data = {0x71, 0x72};
  ASSERT_TRUE(encode(ma, 2, m));
  EXPECT_EQ(hex_of(m), "010702030000000000000000000000020011000000000000010203040506070880a87172");

  Rej rj;
  rj.local_comm_id = 0x01020304;
  rj.remote_comm_id = 0x05060708;
  rj.message_rejected = MsgRef::kRep;
  rj.reason = 0x090a;
  rj.ari = {0x61, 0x62, 0x63};
  rj.private_data = {0x71, 0x72};
  ASSERT_TRUE(encode(rj, 3, m));
  EXPECT_EQ(hex_of(m),
            "01070203000000000000000000000003001200000000000001020304050607084006090a61626300000000"
            "00000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
            "000000000000000000000000000000000000000000007172");

  Rep rp;
  rp.local_comm_id = 0x01020304;
  rp.remote_comm_id = 0x05060708;
  rp.local_qkey = 0x090a0b0c;
  rp.local_qpn = 0x0d0e0f;
  rp.starting_psn = 0x101112;
  rp.responder_resources = 0x13;
  rp.initiator_depth = 0x14;
  rp.target_ack_delay = 0x15;
  rp.failover_accepted = 2;
  rp.end_to_end_flow_control = true;
  rp.rnr_retry_count = 6;
  rp.srq = true;
  rp.local_ca_guid = 0x2122232425262728ull;
  rp.private_data = {0x71, 0x72};
  ASSERT_TRUE(encode(rp, 4, m));
  EXPECT_EQ(hex_of(m),
            "0107020300000000000000000000000400130000000000000102030405060708090a0b0c0d0e0f00000000"
            "00101112001314add021222324252627287172");

  Rtu ru;
  ru.local_comm_id = 0x01020304;
  ru.remote_comm_id = 0x05060708;
  ru.private_data = {0x71};
  ASSERT_TRUE(encode(ru, 5, m));
  EXPECT_EQ(hex_of(m), "010702030000000000000000000000050014000000000000010203040506070871");

  Dreq dq;
  dq.local_comm_id = 0x01020304;
  dq.remote_comm_id = 0x05060708;
  dq.remote_qpn = 0x090a0b;
  dq.private_data = {0x71};
  ASSERT_TRUE(encode(dq, 6, m));
  EXPECT_EQ(hex_of(m),
            "0107020300000000000000000000000600150000000000000102030405060708090a0b0071");

  Drep dp;
  dp.local_comm_id = 0x01020304;
  dp.remote_comm_id = 0x05060708;
  dp.private_data = {0x71};
  ASSERT_TRUE(encode(dp, 7, m));
  EXPECT_EQ(hex_of(m), "010702030000000000000000000000070016000000000000010203040506070871");

  SidrReq sq;
  sq.request_id = 0x01020304;
  sq.pkey = 0x0506;
  sq.service_id = 0x0708090a0b0c0d0eull;
  sq.private_data = {0x71};
  ASSERT_TRUE(encode(sq, 8, m));
  EXPECT_EQ(hex_of(m),
            "01070203000000000000000000000008001700000000000001020304050600000708090a0b0c0d0e71");

  SidrRep sp;
  sp.request_id = 0x01020304;
  sp.status = SidrStatus::kRedirect;
  sp.qpn = 0x050607;
  sp.service_id = 0x08090a0b0c0d0e0full;
  sp.qkey = 0x10111213;
  sp.private_data = {0x71};
  ASSERT_TRUE(encode(sp, 9, m));
  EXPECT_EQ(hex_of(m),
            "01070203000000000000000000000009001800000000000001020304040000000506070008090a0b0c0d0e"
            "0f101112130000000000000000000000000000000000000000000000000000000000000000000000000000"
            "0000000000000000000000000000000000000000000000000000000000000000000071");
}

// Decoding counting bytes and encoding the result again: the decoders give every field its own
// value, and the bytes that come back are today's (reserved bits zero, REJ's ARI cut to its
// Reject Info Length).
TEST(KnownAnswer, DecodeThenEncodeCountingBytes) {
  const auto b = counting_bytes();
  Mad m;
  ASSERT_TRUE(encode(decode_req(b.data()), 1, m));
  EXPECT_EQ(hex_of(m),
            "0107020300000000000000000000000100100000000000000102030400000000090a0b0c0d0e0f10111213"
            "1415161718000000001d1e1f2021222324000000280000002c2d2e2f303132333035363738393a3b3c3d3e"
            "3f404142434445464748494a4b4c4d4e4f505152535455565758595a501c5d5e5860000000000000000000"
            "00000000000000000000000000000000000000000000000000000000000000000000008d8e8f9091929394"
            "95969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
            "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8");
  ASSERT_TRUE(encode(decode_mra(b.data()), 1, m));
  EXPECT_EQ(hex_of(m),
            "010702030000000000000000000000010011000000000000010203040506070800080b0c0d0e0f10111213"
            "1415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e"
            "3f404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f60616263646566676869"
            "6a6b6c6d6e6f707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f9091929394"
            "95969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
            "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8");
  ASSERT_TRUE(encode(decode_rej(b.data()), 1, m));
  EXPECT_EQ(hex_of(m),
            "0107020300000000000000000000000100120000000000000102030405060708000a0b0c0d0e0f10110000"
            "00000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
            "0000000000000000000000000000000000000000000055565758595a5b5c5d5e5f60616263646566676869"
            "6a6b6c6d6e6f707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f9091929394"
            "95969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
            "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8");
  ASSERT_TRUE(encode(decode_rep(b.data()), 1, m));
  EXPECT_EQ(hex_of(m),
            "0107020300000000000000000000000100130000000000000102030405060708090a0b0c0d0e0f00000000"
            "0015161700191a1b101d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e"
            "3f404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f60616263646566676869"
            "6a6b6c6d6e6f707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f9091929394"
            "95969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
            "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8");
  ASSERT_TRUE(encode(decode_rtu(b.data()), 1, m));
  EXPECT_EQ(hex_of(m),
            "0107020300000000000000000000000100140000000000000102030405060708090a0b0c0d0e0f10111213"
            "1415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e"
            "3f404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f60616263646566676869"
            "6a6b6c6d6e6f707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f9091929394"
            "95969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
            "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8");
  ASSERT_TRUE(encode(decode_dreq(b.data()), 1, m));
  EXPECT_EQ(hex_of(m),
            "0107020300000000000000000000000100150000000000000102030405060708090a0b000d0e0f10111213"
            "1415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e"
            "3f404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f60616263646566676869"
            "6a6b6c6d6e6f707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f9091929394"
            "95969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
            "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8");
  ASSERT_TRUE(encode(decode_drep(b.data()), 1, m));
  EXPECT_EQ(hex_of(m),
            "0107020300000000000000000000000100160000000000000102030405060708090a0b0c0d0e0f10111213"
            "1415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e"
            "3f404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f60616263646566676869"
            "6a6b6c6d6e6f707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f9091929394"
            "95969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
            "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8");
  ASSERT_TRUE(encode(decode_sidr_req(b.data()), 1, m));
  EXPECT_EQ(hex_of(m),
            "0107020300000000000000000000000100170000000000000102030405060000090a0b0c0d0e0f10111213"
            "1415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e"
            "3f404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f60616263646566676869"
            "6a6b6c6d6e6f707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f9091929394"
            "95969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
            "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8");
  ASSERT_TRUE(encode(decode_sidr_rep(b.data()), 1, m));
  EXPECT_EQ(hex_of(m),
            "0107020300000000000000000000000100180000000000000102030405000000090a0b000d0e0f10111213"
            "14151617180000000000000000000000000000000000000000000000000000000000000000000000000000"
            "00000000000000000000000000000000000000000000000000000000000000000000616263646566676869"
            "6a6b6c6d6e6f707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f9091929394"
            "95969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
            "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8");
}

}  // namespace
}  // namespace uroce::cm
