// Protection domains and memory regions. The engine's key table owns keys, bounds and access
// enforcement; this layer validates the request's shape and records the region for the
// application (struct ibv_mr).
#include <cerrno>
#include <cstdint>
#include <new>

#include "objects.h"
#include "provider.h"
#include "transport/memory_table.h"

namespace uroce::verbs {
namespace {

// Access flags a uroce MR accepts. IBV_ACCESS_RELAXED_ORDERING and the rest of the optional
// range may be ignored by any provider (ibv_reg_mr(3)). IBV_ACCESS_MW_BIND lets memory windows
// be bound to the region (mw.cc). IBV_ACCESS_ON_DEMAND (on-demand paging) where the host can
// fault pages in without touching them (transport::TableMemory::on_demand_supported), with
// IBV_ACCESS_HUGETLB as the hint it is (pages the kernel maps are whatever they are). Zero-based
// MRs and the flush extensions are not implemented.
constexpr unsigned kBaseAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                 IBV_ACCESS_MW_BIND;

// The flags outside those accepted (ignoring the optional range): 0 when the request is fine.
unsigned unsupported_access(unsigned access) {
  unsigned required = access & ~static_cast<unsigned>(IBV_ACCESS_OPTIONAL_RANGE);
  unsigned ok = kBaseAccess;
  if (transport::TableMemory::on_demand_supported()) {
    ok |= IBV_ACCESS_ON_DEMAND;
    // ibv_reg_mr(3): HUGETLB applies to explicit on-demand regions only.
    if (access & IBV_ACCESS_ON_DEMAND) ok |= IBV_ACCESS_HUGETLB;
  }
  return required & ~ok;
}

// A region that is not on demand must be there when it is registered, as an RNIC's registration
// pins its pages (the kernel's ib_umem_get fails with EFAULT otherwise): every page mapped, and
// writable if the region may be written. Without this check a region over unmapped or read-only
// memory registered fine and the first receive or remote WRITE into it was a SIGSEGV in the
// process; now the program learns at ibv_reg_mr. Faulting the pages in is what pinning does too.
// Only where the kernel has MADV_POPULATE_* (the same test as on-demand paging); elsewhere, as
// before, the region is trusted.
bool mapped_for(const void* addr, size_t length, unsigned access) {
  if (!transport::TableMemory::on_demand_supported()) return true;
  return transport::TableMemory::populate(static_cast<const uint8_t*>(addr), length,
                                          (access & IBV_ACCESS_LOCAL_WRITE) != 0) ==
         transport::MemStatus::kOk;
}

}  // namespace

ibv_pd* alloc_pd(ibv_context* ctx) {
  VContext* c = to_v(ctx);
  try {
    auto* pd = new VPd();
    pd->handle = c->dev->alloc_pd();
    if (pd->handle == 0) {  // 0 is never a valid PD handle
      delete pd;
      errno = ENOMEM;
      return nullptr;
    }
    pd->ctx = c;
    pd->pd.context = ctx;
    pd->pd.handle = pd->handle;
    std::lock_guard<std::mutex> g(c->mu);
    c->pds.insert(pd);
    return &pd->pd;
  } catch (const std::bad_alloc&) {
    errno = ENOMEM;
    return nullptr;
  }
}

int dealloc_pd(ibv_pd* ibpd) {
  VPd* pd = to_v(ibpd);
  VContext* c = pd->ctx;
  int rc = c->dev->dealloc_pd(pd->handle);  // EBUSY while MRs or QPs use it
  if (rc) return rc;
  {
    std::lock_guard<std::mutex> g(c->mu);
    c->pds.erase(pd);
  }
  delete pd;
  return 0;
}

ibv_mr* reg_mr(ibv_pd* ibpd, void* addr, size_t length, uint64_t iova, unsigned access) {
  VPd* pd = to_v(ibpd);
  VContext* c = pd->ctx;
  if (unsupported_access(access)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  // Remote write and remote atomic need local write (ibv_reg_mr(3), IBTA o10-?).
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(access & IBV_ACCESS_LOCAL_WRITE)) {
    errno = EINVAL;
    return nullptr;
  }
  // Implicit on-demand paging (ibv_reg_mr(3)): addr NULL and length SIZE_MAX register the whole
  // address space; its SGEs and peers use plain virtual addresses.
  const bool implicit = (access & IBV_ACCESS_ON_DEMAND) && !addr && length == SIZE_MAX;
  if (implicit && ((access & IBV_ACCESS_HUGETLB) || iova != 0)) {
    errno = EINVAL;
    return nullptr;
  }
  if (!implicit && (length == 0 || length > DeviceLimits::kMaxMrSize || !addr)) {
    errno = EINVAL;
    return nullptr;
  }
  if (!(access & IBV_ACCESS_ON_DEMAND) && !mapped_for(addr, length, access)) {
    errno = EFAULT;
    return nullptr;
  }
  try {
    auto* mr = new VMr();
    uint32_t lkey = 0, rkey = 0;
    // SGEs and peers name the region's bytes from `iova` on (ibv_reg_mr_iova2(3)); plain
    // ibv_reg_mr passes iova == addr.
    int rc =
        c->dev->reg_mr_iova(pd->handle, addr, length, iova, static_cast<int>(access), &lkey, &rkey);
    if (rc) {
      delete mr;
      errno = rc;
      return nullptr;
    }
    mr->ctx = c;
    mr->access = static_cast<int>(access);
    mr->mr.context = &c->vctx.context;
    mr->mr.pd = ibpd;
    mr->mr.addr = addr;
    mr->mr.length = length;
    mr->mr.handle = lkey;
    mr->mr.lkey = lkey;
    mr->mr.rkey = rkey;
    std::lock_guard<std::mutex> g(c->mu);
    c->mrs.insert(mr);
    return &mr->mr;
  } catch (const std::bad_alloc&) {
    errno = ENOMEM;
    return nullptr;
  }
}

int rereg_mr(ibv_mr* ibmr, int flags, ibv_pd* ibpd, void* addr, size_t length, int access) {
  VMr* mr = to_v(ibmr);
  VContext* c = mr->ctx;
  // Input errors leave the MR as it was (IBV_REREG_MR_ERR_INPUT). The same checks as
  // libibverbs makes before calling a provider: a known, non-empty flag set, a translation with
  // an address and a length, access flags only with CHANGE_ACCESS, a PD of this context.
  auto input_error = [](int err) {
    errno = err;
    return IBV_REREG_MR_ERR_INPUT;
  };
  if (flags == 0 || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED)) return input_error(EINVAL);
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) &&
      (!addr || length == 0 || length > DeviceLimits::kMaxMrSize))
    return input_error(EINVAL);
  if (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS)) return input_error(EINVAL);
  if ((flags & IBV_REREG_MR_CHANGE_PD) && (!ibpd || ibpd->context != ibmr->context))
    return input_error(EINVAL);
  if ((flags & IBV_REREG_MR_CHANGE_ACCESS) && unsupported_access(static_cast<unsigned>(access)))
    return input_error(EOPNOTSUPP);
  // The region it becomes must be there, as at registration (mapped_for); refused as the kernel
  // refuses a translation it cannot pin: the command fails, the region is unchanged.
  const bool new_translation = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
  const unsigned next_access =
      static_cast<unsigned>((flags & IBV_REREG_MR_CHANGE_ACCESS) ? access : mr->access);
  if (!(next_access & IBV_ACCESS_ON_DEMAND) &&
      !mapped_for(new_translation ? addr : ibmr->addr, new_translation ? length : ibmr->length,
                  next_access)) {
    errno = EFAULT;
    return IBV_REREG_MR_ERR_CMD;
  }
  const uint32_t pd_handle = (flags & IBV_REREG_MR_CHANGE_PD) ? to_v(ibpd)->handle : 0;
  // ibv_rereg_mr has no iova: a new translation is addressed at its own virtual address, as
  // ibv_reg_mr's.
  int rc = c->dev->rereg_mr(ibmr->lkey, flags, pd_handle, addr, length,
                            reinterpret_cast<uintptr_t>(addr), access);
  if (rc) {
    // The engine changes all or nothing, so the old MR is in fact still valid; ERR_CMD is what
    // libibverbs reports for a refused command (errno EBUSY while windows are bound).
    errno = rc;
    return IBV_REREG_MR_ERR_CMD;
  }
  // Keys are kept (see KeyTable::rereg_mr); the application's view follows the change.
  if (flags & IBV_REREG_MR_CHANGE_PD) ibmr->pd = ibpd;
  if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
    ibmr->addr = addr;
    ibmr->length = length;
  }
  if (flags & IBV_REREG_MR_CHANGE_ACCESS) mr->access = access;
  return 0;
}

int advise_mr(ibv_pd* ibpd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
              uint32_t num_sge) {
  // The prefetch is done before the call returns, with or without IBV_ADVISE_MR_FLAG_FLUSH:
  // stronger than the asynchronous prefetch a program asks for without it, which any provider
  // may do at any time before the access.
  if (!ibpd || (flags & ~static_cast<uint32_t>(IBV_ADVISE_MR_FLAG_FLUSH)) || (num_sge && !sg_list))
    return EINVAL;
  bool write = false, populate = true;
  switch (advice) {
    case IBV_ADVISE_MR_ADVICE_PREFETCH:
      break;
    case IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE:
      write = true;
      break;
    case IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT:
      // Only pages already present: the device sees the process's own page tables, so what is
      // present to the CPU is present to it.
      populate = false;
      break;
    default:
      return EOPNOTSUPP;  // ENOTSUP: an advice this provider does not know
  }
  VPd* pd = to_v(ibpd);
  return pd->ctx->dev->prefetch_mr(pd->handle, write, populate, sg_list, num_sge);
}

int dereg_mr(ibv_mr* ibmr) {
  VMr* mr = to_v(ibmr);
  VContext* c = mr->ctx;
  int rc = c->dev->dereg_mr(mr->mr.lkey);
  if (rc) return rc;
  {
    std::lock_guard<std::mutex> g(c->mu);
    c->mrs.erase(mr);
  }
  delete mr;
  return 0;
}

}  // namespace uroce::verbs
