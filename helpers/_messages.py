"""The helpers' messages in each edition's language, {language: {English: translation}}: written by
`make release` from i18n/<lang>/helpers.po (i18n/catalog.py); edit the catalogs, not this file."""

CATALOGS = {
    'tr': {
        '{name} must be an int, got {kind} {value!r}':
            '{name} bir int olmalıdır, gelen: {kind} {value!r}',
        '{name} must be >= {minimum}, got {value}':
            '{name} >= {minimum} olmalıdır, gelen: {value}',
        '{name} must be one of {choices}, got {value!r}':
            '{name} şunlardan biri olmalıdır: {choices}, gelen: {value!r}',
        '{name} must be a positive number, got {value!r}':
            '{name} pozitif bir sayı olmalıdır, gelen: {value!r}',
        '{name} must be callable, got {kind}':
            '{name} çağrılabilir olmalıdır, gelen: {kind}',
        '{name} must be True or False, got {value!r}':
            '{name} True ya da False olmalıdır, gelen: {value!r}',
        '{name} must be a dict of str to str, got {value!r}':
            "{name} str'den str'ye bir dict olmalıdır, gelen: {value!r}",
        '{name} must be {none}torch.float16 or torch.bfloat16, got {value}':
            '{name} {none}torch.float16 ya da torch.bfloat16 olmalıdır, gelen: {value}',
        'args must be a tuple, got {kind}':
            'args bir tuple olmalıdır, gelen: {kind}',
        'n_samples must be a multiple of batch_size x num_processes for an exact reference':
            "tam bir referans için n_samples, batch_size x num_processes'in bir katı olmalıdır",
        "the processes' loaders have different numbers of batches: {local}":
            'süreçlerin yükleyicilerindeki yığın sayıları farklı: {local}',
        'saved to {folder}: {files}':
            '{folder} klasörüne kaydedildi: {files}',
        'with a TPU, {name} is not known to leave Accelerate and torch_xla on it':
            "TPU varken {name} değişkeninin Accelerate'i ve torch_xla'yı TPU'da bıraktığı bilinmiyor",
        'with a TPU, {name}={value} keeps Accelerate or torch_xla off it':
            "TPU varken {name}={value}, Accelerate'i ya da torch_xla'yı TPU'dan uzak tutar",
        'x must be a tensor on the CPU, got {x!r:.60}':
            "x CPU'da bir tensör olmalıdır, gelen: {x!r:.60}",
        'model must be an nn.Module, got {kind}':
            'model bir nn.Module olmalıdır, gelen: {kind}',
        'matmul_tflops measures a GPU; this machine has none':
            "matmul_tflops bir GPU'yu ölçer; bu makinede GPU yok",
        'k * rows must be below 256, got {k} * {rows}':
            "k * rows 256'dan küçük olmalıdır, gelen: {k} * {rows}",
        'elsewhere must be a bool, got {elsewhere!r}':
            'elsewhere bir bool olmalıdır, gelen: {elsewhere!r}',
        'state_dict must be a mapping of names to tensors, got {kind}':
            'state_dict adlardan tensörlere bir eşleme olmalıdır, gelen: {kind}',
        'command must be a list of arguments, got {kind}':
            'command bir argüman listesi olmalıdır, gelen: {kind}',
        'commands must be a non-empty list of argument lists, got {commands!r}':
            'commands argüman listelerinden oluşan boş olmayan bir liste olmalıdır, gelen: {commands!r}',
        'A launcher started by helpers.commands (torchrun, accelerate launch)':
            "helpers.commands'ın başlattığı bir başlatıcı (torchrun, accelerate launch)",
        'the command ran past timeout_s={timeout_s} s and was stopped, with every process it started':
            'komut timeout_s={timeout_s} saniyeyi aştı ve başlattığı her süreçle birlikte durduruldu',
        '{name} must be a finite number >= 0, got {value!r}':
            '{name} >= 0 sonlu bir sayı olmalıdır, gelen: {value!r}',
        'expected must be plain data (bool, int, float, str, None, list, tuple, dict, tensor, dtype, device), got {kind}':
            'expected düz veri olmalıdır (bool, int, float, str, None, list, tuple, dict, tensör, dtype, device), gelen: {kind}',
        'fields must be a dict of key -> type, tuple of types or None, got {fields!r}':
            "fields anahtardan türe, tür tuple'ına ya da None'a bir dict olmalıdır, gelen: {fields!r}",
        'scatter':
            'dağıtma (scatter)',
        'replicate':
            'çoğaltma (replicate)',
        'forward':
            'ileri geçiş',
        'gather':
            'toplama (gather)',
        'backward':
            'geriye yayılım',
        'x must be a batch: a tensor with at least one dimension':
            'x bir yığın olmalıdır: en az bir boyutu olan bir tensör',
        "the model's inputs were not tensors":
            'modelin girdileri tensör değildi',
        "the model ran more than once on one device's rows: run it once per device":
            'model bir cihazın satırları üzerinde birden çok kez çalıştı: her cihaz için bir kez çalıştırınız',
        "the model ran on rows that are no device's piece: split the batch as DataParallel does (contiguous pieces, torch's chunk rule)":
            "model hiçbir cihazın parçası olmayan satırlar üzerinde çalıştı: yığını DataParallel'in yaptığı gibi bölünüz (ardışık parçalar, torch'un chunk kuralı)",
        "the model never ran on some device's rows: run it once on each device's piece":
            'model bazı cihazların satırları üzerinde hiç çalışmadı: her cihazın parçası üzerinde bir kez çalıştırınız',
        "work out the rule yourself: torch.chunk and the course's split helpers are off limits here":
            'kuralı kendiniz bulunuz: torch.chunk ve kursun bölme yardımcıları burada yasaktır',
        'message must be a non-empty str, got {message!r}':
            'message boş olmayan bir str olmalıdır, gelen: {message!r}',
        'device_ids: the real nn.DataParallel needs CUDA devices; use emulate=True on this machine':
            'device_ids: gerçek nn.DataParallel CUDA cihazları ister; bu makinede emulate=True kullanınız',
        'real nn.DataParallel on CUDA devices {ids}':
            '{ids} CUDA cihazlarında gerçek nn.DataParallel',
        'output_device must be one of device_ids {device_ids}, got {output_device!r}':
            'output_device, device_ids {device_ids} içinden biri olmalıdır, gelen: {output_device!r}',
        'dim must be an int, got {dim!r}':
            'dim bir int olmalıdır, gelen: {dim!r}',
        'module: the emulation runs on the CPU, found a tensor on {device}':
            "module: öykünme CPU'da çalışır, {device} üzerinde bir tensör bulundu",
        'emulated nn.DataParallel on {n} virtual CPU devices':
            '{n} sanal CPU cihazında öykünülmüş nn.DataParallel',
        'emulate must be None, True or False, got {emulate!r}':
            'emulate None, True ya da False olmalıdır, gelen: {emulate!r}',
        'device_ids {ids}: only {gpus} CUDA devices exist':
            'device_ids {ids}: yalnızca {gpus} CUDA cihazı var',
        'device_ids must be a non-empty list of non-negative ints, got {device_ids!r}':
            "device_ids negatif olmayan int'lerden oluşan boş olmayan bir liste olmalıdır, gelen: {device_ids!r}",
        'device_ids must not repeat a device, got {ids}':
            'device_ids bir cihazı tekrarlamamalıdır, gelen: {ids}',
        'record must be what loader_batches returns for {world_size} ranks':
            "record, loader_batches'in {world_size} rank için döndürdüğü şey olmalıdır",
        'rank {rank}: make_loader returned a {loader}, not a DataLoader':
            'rank {rank}: make_loader bir DataLoader değil, bir {loader} döndürdü',
        'rank {rank}: a batch of {size} samples, more than batch_size={batch_size}':
            'rank {rank}: {size} örneklik bir yığın, batch_size={batch_size} değerinden fazla',
        "rank {rank}: a batch holds a {kind}, not the dataset's tensors":
            'rank {rank}: bir yığında veri kümesinin tensörleri değil, bir {kind} var',
        'rank {rank} sees a sample twice in one epoch':
            'rank {rank} bir epoch içinde bir örneği iki kez görüyor',
        'the ranks get different numbers of samples ({counts}): their gradients would not weigh alike':
            "rank'lar farklı sayıda örnek alıyor ({counts}): gradyanları eşit ağırlıkta olmaz",
        'each rank gets {count} of the {n_samples} samples over {world_size} ranks: every rank must get the same share, n_samples / world_size rounded up':
            "{world_size} rank'a dağıtılan {n_samples} örneğin {count} tanesini her rank alıyor: her rank aynı payı, yukarı yuvarlanmış n_samples / world_size kadarını almalıdır",
        '{batches} batches per rank: expected the batches of {share} samples at batch_size={batch_size}':
            'rank başına {batches} yığın: batch_size={batch_size} ile {share} örneğin yığınları bekleniyordu',
        'samples on no rank: {missing} of the {n_samples}':
            "hiçbir rank'ta olmayan örnekler: {n_samples} örnekten {missing} tanesi",
        'cfg must be a TrainConfig, got {kind}':
            'mean_loss bir float olmalıdır, gelen: {kind}',
        "ranks must be the list of checkpoint_worker's results":
            "ranks, checkpoint_worker'ın sonuçlarının listesi olmalıdır",
        'rank 0 did not write the checkpoint':
            'rank 0 denetim noktasını yazmadı',
        'ranks {writers} all wrote the checkpoint: only rank 0 may write it (the others race it for the same file)':
            'rank {writers}: hepsi denetim noktasını yazdı: yalnızca rank 0 yazabilir (diğerleri aynı dosya için onunla yarışır)',
        'what the checkpoint holds':
            'denetim noktasının içeriği',
        'a plain model cannot load it (save the model inside DDP)':
            "düz bir model onu yükleyemez (DDP'nin içindeki modeli kaydediniz)",
        'rank {rank} loaded weights that differ from the trained ones':
            'rank {rank} eğitilenlerden farklı ağırlıklar yükledi',
        "rank {rank}'s weights changed while it saved: saving must leave the model as it is":
            'rank {rank} kaydederken ağırlıkları değişti: kaydetmek modeli olduğu gibi bırakmalıdır',
        '{what} is a {kind}, not a state dict of tensors':
            '{what} tensörlerden oluşan bir durum sözlüğü değil, bir {kind}',
        "the keys of {what} start with 'module.': {hint}":
            "{what} anahtarları 'module.' ile başlıyor: {hint}",
        "the keys of {what} are not the model's state dict keys":
            '{what} anahtarları modelin durum sözlüğü anahtarları değil',
        'error must be an exception, got {kind}':
            'mean_loss bir float olmalıdır, gelen: {kind}',
        'the file is not a plain state dict of tensors':
            'dosya tensörlerden oluşan düz bir durum sözlüğü değil',
        'a rank read the file before rank 0 had finished writing it':
            'bir rank dosyayı, rank 0 yazmayı bitirmeden okudu',
        'a rank waited for a partner that never came (a barrier that not every rank reaches?)':
            "bir rank hiç gelmeyen bir ortağı bekledi (her rank'ın ulaşmadığı bir bariyer mi?)",
        'its traceback names no line of your code':
            'hata izi kodunuzun hiçbir satırını göstermiyor',
        'rank {rank} failed: {line} ({hint})':
            'rank {rank} başarısız oldu: {line} ({hint})',
        'raised in {function}: {code}':
            '{function} içinde fırlatıldı: {code}',
        "ranks must be the non-empty list of the worker's results":
            "ranks, worker'ın sonuçlarından oluşan boş olmayan liste olmalıdır",
        "return a dict with the keys 'state' and 'mean_loss' (and no others)":
            "'state' ve 'mean_loss' anahtarlı bir sözlük döndürünüz (başka anahtar olmadan)",
        "the returned 'state'":
            "döndürülen 'state'",
        'return the clean state dict of the model inside DDP':
            "DDP'nin içindeki modelin temiz durum sözlüğünü döndürünüz",
        'the ranks end with different weights: are the gradients averaged (the model wrapped in DDP)?':
            "rank'lar farklı ağırlıklarla bitiyor: gradyanların ortalaması alınıyor mu (model DDP'ye sarılı mı)?",
        'the weights equal a run that never calls set_epoch: call sampler.set_epoch(epoch) every epoch':
            "ağırlıklar set_epoch'u hiç çağırmayan bir çalıştırmanınkine eşit: her epoch'ta örnekleyicinin set_epoch'unu çağırınız (sampler.set_epoch(epoch))",
        'the weights differ from one process trained on the same global batches: check the sampler, the batch size, the learning rate, zero_grad, the loss and set_epoch (the same epoch on every rank, numbered from 0 or from 1)':
            "ağırlıklar, aynı global yığınlarla eğitilen tek bir süreçtekilerden farklı: örnekleyiciyi, yığın boyutunu, öğrenme oranını, zero_grad'i, kaybı ve set_epoch'u (her rank'ta aynı epoch, 0'dan ya da 1'den numaralanmış) denetleyiniz",
        'mean_loss must be a float, got {kind}':
            'mean_loss bir float olmalıdır, gelen: {kind}',
        'mean_loss is not a finite number':
            'mean_loss sonlu bir sayı değil',
        'the ranks return different mean_loss values: all-reduce the loss':
            "rank'lar farklı mean_loss değerleri döndürüyor: kaybı all-reduce ediniz",
        "mean_loss is not the mean over the ranks of the last batch's loss":
            "mean_loss, son yığının kaybının rank'lar üzerinden ortalaması değil",
        'expected a result from each of the {world_size} ranks':
            "{world_size} rank'ın her birinden bir sonuç bekleniyordu",
        'step 5: rank {rank} was still in the process group when the worker returned: leave it (dist.destroy_process_group())':
            'adım 5: işçi döndüğünde rank {rank} hâlâ süreç grubundaydı: gruptan çıkınız (dist.destroy_process_group())',
        'rank must be an int in [0, {world_size}), got {rank!r}':
            'rank [0, {world_size}) aralığında bir int olmalıdır, gelen: {rank!r}',
        'epoch_numbers must be a list of {epochs} ints, got {epoch_numbers!r}':
            "epoch_numbers {epochs} int'lik bir liste olmalıdır, gelen: {epoch_numbers!r}",
        'steps: {steps} steps of {per_step} samples need more than cfg.n_samples={n_samples}':
            'steps: {per_step} örneklik {steps} adım cfg.n_samples={n_samples} değerinden fazlasını ister',
        '{steps} steps, last mean loss {loss:.4f}':
            '{steps} adım, son ortalama kayıp {loss:.4f}',
        'rank {rank} of {world_size}, process {pid}':
            "{world_size} rank'tan rank {rank}, süreç {pid}",
        'path must be a str or os.PathLike, got {kind}':
            'path bir str ya da os.PathLike olmalıdır, gelen: {kind}',
        'slow_s must be a number >= 0, got {slow_s!r}':
            'slow_s >= 0 bir sayı olmalıdır, gelen: {slow_s!r}',
        'server must be a ForkServer or None, got {kind}':
            'server bir ForkServer ya da None olmalıdır, gelen: {kind}',
        'stopped before it started: another job failed or the run was interrupted':
            'başlamadan durduruldu: başka bir iş başarısız oldu ya da çalıştırma kesildi',
        'the process exited with code {code}:':
            'süreç {code} koduyla çıktı:',
        'in the fresh process:':
            'yeni süreçte:',
        'the process used more than timeout_s={timeout_s} CPU-seconds and was stopped':
            'süreç timeout_s={timeout_s} CPU-saniyeden fazlasını kullandı ve durduruldu',
        'the fork server did not import {modules} within {seconds} CPU-seconds':
            'fork sunucusu {modules} modüllerini {seconds} CPU-saniye içinde içe aktaramadı',
        'the fork server could not start:':
            'fork sunucusu başlayamadı:',
        'the fork server exited with code {code}':
            'fork sunucusu {code} koduyla çıktı',
        "the job's process ended before it reported the job's end":
            'işin süreci, işin bittiğini bildirmeden sona erdi',
        'modules must be a list of module names, got {modules!r}':
            'modules bir modül adları listesi olmalıdır, gelen: {modules!r}',
        '{argument} must be a non-empty str, got {value!r}':
            '{argument} boş olmayan bir str olmalıdır, gelen: {value!r}',
        'the value nests deeper than {max_depth} levels':
            'değer {max_depth} düzeyden daha derin iç içe geçiyor',
        'the collected results take {size} bytes, more than {max_bytes}':
            'toplanan sonuçlar {size} bayt tutuyor, {max_bytes} bayttan fazla',
        'seed must be a non-negative int, got {seed!r}':
            'seed negatif olmayan bir int olmalıdır, gelen: {seed!r}',
        'yes':
            'var',
        'no':
            'yok',
        '{name} (sm {cc}, fp16 tensor cores {fp16}, bf16 {bf16})':
            '{name} (sm {cc}, fp16 tensör çekirdekleri {fp16}, bf16 {bf16})',
        'native':
            'donanımda (native)',
        'emulated':
            'öykünülmüş (emulated)',
        '1 chip':
            '1 çip',
        '{n} chips':
            '{n} çip',
        '1 XLA device':
            '1 XLA cihazı',
        '{n} XLA devices':
            '{n} XLA cihazı',
        'real nn.DataParallel over {n} GPUs':
            '{n} GPU üzerinde gerçek nn.DataParallel',
        'emulated nn.DataParallel (virtual devices on the CPU)':
            "öykünülmüş nn.DataParallel (CPU'da sanal cihazlar)",
        'nccl, one GPU per process ({n} processes)':
            'nccl, süreç başına bir GPU ({n} süreç)',
        '; 1 GPU cannot give each rank its own':
            "; 1 GPU her rank'a kendi GPU'sunu veremez",
        '; {n} GPUs cannot give each rank its own':
            "; {n} GPU her rank'a kendi GPU'sunu veremez",
        'gloo, CPU processes ({n} processes, 1 thread each{why})':
            'gloo, CPU süreçleri ({n} süreç, her biri 1 iş parçacıklı{why})',
        'gloo, CPU processes ({n} processes, {threads} threads each{why})':
            'gloo, CPU süreçleri ({n} süreç, her biri {threads} iş parçacıklı{why})',
        ', but torch_xla is missing':
            ', ama torch_xla kurulu değil',
        'no TPU: XLA:CPU with {n} virtual devices (PJRT_DEVICE=CPU)':
            'TPU yok: {n} sanal cihazlı XLA:CPU (PJRT_DEVICE=CPU)',
        'torch_xla not installed':
            'torch_xla kurulu değil',
        'bf16 on the CPU: fast only with bf16 units (AMX, AVX-512-BF16); measure':
            "CPU'da bf16: yalnızca bf16 birimleriyle (AMX, AVX-512-BF16) hızlıdır; ölçünüz",
        'bf16 on cuda:0 ({name}): compute capability unknown (bf16 tensor cores need 8.0, Ampere, or newer)':
            'cuda:0 üzerinde bf16 ({name}): compute capability bilinmiyor (bf16 tensör çekirdekleri 8.0, Ampere ya da daha yenisini ister)',
        'bf16 on cuda:0 ({name}, sm {cc}): native (bf16 tensor cores)':
            'cuda:0 üzerinde bf16 ({name}, sm {cc}): donanımda (bf16 tensör çekirdekleri)',
        'bf16 on cuda:0 ({name}, sm {cc}): EMULATED. torch.cuda.is_bf16_supported() says True, but this GPU has no bf16 tensor cores (they start at sm 8.0): bf16 runs without tensor-core speed. Its fast format is fp16, with a GradScaler.':
            "cuda:0 üzerinde bf16 ({name}, sm {cc}): ÖYKÜNÜLMÜŞ (EMULATED). torch.cuda.is_bf16_supported() True diyor, ama bu GPU'da bf16 tensör çekirdekleri yok (sm 8.0 ile başlarlar): bf16, tensör çekirdeği hızı olmadan çalışır. Bu GPU'nun hızlı biçimi, GradScaler ile fp16'dır.",
        'none':
            'yok',
        'local machine':
            'yerel makine',
        'torch {version} on a {runtime}':
            'torch {version}, {runtime} üzerinde',
        'CPU cores : {n}':
            'CPU çekirdekleri: {n}',
        'CUDA GPUs : {n} ({gpus})':
            "CUDA GPU'ları: {n} ({gpus})",
        '{virtual_xla_devices_env} must be a positive integer, got {value!r}':
            '{virtual_xla_devices_env} pozitif bir tam sayı olmalıdır, gelen: {value!r}',
        "no helpers' catalog for {language!r}: one of {languages}":
            "helpers'ın {language!r} için kataloğu yok: şunlardan biri: {languages}",
        "--- this rank's stderr ---":
            "--- bu rank'ın stderr çıktısı ---",
        'rank {rank} failed:':
            'rank {rank} başarısız oldu:',
        "--- rank {rank}'s stderr (no result yet) ---":
            '--- rank {rank}: stderr çıktısı (henüz sonuç yok) ---',
        "backend must be 'gloo' or 'nccl', got {backend!r}":
            "backend 'gloo' ya da 'nccl' olmalıdır, gelen: {backend!r}",
        "backend 'nccl' needs one GPU per rank: {n_procs} ranks, {gpus} GPUs":
            "'nccl' backend'i rank başına bir GPU ister: {n_procs} rank, {gpus} GPU",
        "no result from ranks {ranks} before the launch's deadline (a rank may be stuck)":
            "başlatmanın süre sınırından önce şu rank'lardan sonuç gelmedi: {ranks} (bir rank takılmış olabilir)",
        "no result from rank {ranks} before the launch's deadline (a rank may be stuck)":
            'başlatmanın süre sınırından önce rank {ranks} sonuç vermedi (takılmış olabilir)',
        'the process was killed by {name} (exit code {exitcode}) without a result':
            'süreç, sonuç vermeden {name} ile sonlandırıldı (çıkış kodu {exitcode})',
        'the process exited with code {exitcode} without a result':
            'süreç, sonuç vermeden {exitcode} koduyla çıktı',
        '{n} ranks':
            '{n} rank',
        'step':
            'adım',
        '(then rank {rank} failed: {line})':
            '(ardından rank {rank} başarısız oldu: {line})',
        '(then rank {rank} lost its connection to rank {other})':
            '(ardından rank {rank}, rank {other} ile bağlantısını kaybetti)',
        'loader must be a DataLoader or a loader wrapping one, got {kind}':
            'loader bir DataLoader ya da onu saran bir loader olmalıdır, gelen: {kind}',
        'kwargs must be a dict of some of {device_args}, got {kwargs!r}':
            "kwargs, {device_args} arasından bazılarının bir dict'i olmalıdır, gelen: {kwargs!r}",
        'parameters':
            'parametreler',
        'gradients':
            'gradyanlar',
        'flattened gradients':
            'düzleştirilmiş gradyanlar',
        'reduced gradients':
            'indirgenmiş gradyanlar',
        'optimizer state':
            'optimizer durumu',
        'activations':
            'aktivasyonlar',
        'inputs':
            'girdiler',
        'outputs':
            'çıktılar',
        'gathered outputs':
            'toplanmış çıktılar',
        'loss':
            'kayıp',
        'emulated on CPU (ledger of the tensors each virtual device holds)':
            "CPU'da öykünülmüş (her sanal cihazın tuttuğu tensörlerin defteri)",
        "measured on CUDA (torch.cuda.max_memory_allocated per device, including cuBLAS's workspace: 8 MiB, 32 MiB on Hopper)":
            "CUDA'da ölçülmüş (cihaz başına torch.cuda.max_memory_allocated, cuBLAS'ın çalışma alanı dahil: 8 MiB, Hopper'da 32 MiB)",
        'total':
            'toplam',
        'device {i}':
            'cihaz {i}',
        'bytes per device, {source}':
            'cihaz başına bayt, {source}',
        'model must come from helpers.dataparallel.make_data_parallel':
            "model helpers.dataparallel.make_data_parallel'dan gelmelidir",
        'optimizer must be a torch.optim.Optimizer, got {kind}':
            'optimizer bir torch.optim.Optimizer olmalıdır, gelen: {kind}',
        'loss_fn must be callable':
            'loss_fn çağrılabilir olmalıdır',
        'model: the ledger needs >= 2 device_ids (on one device DataParallel is a plain call)':
            'model: defter >= 2 device_ids ister (tek cihazda DataParallel düz bir çağrıdır)',
        'peak allocated':
            'ayrılan en yüksek bellek',
        'all-reduce buckets':
            'all-reduce kovaları',
        'ddp_model must be a DistributedDataParallel, got {kind}':
            'ddp_model bir DistributedDataParallel olmalıdır, gelen: {kind}',
        'size must be a multiple of 4 (two 2x2 poolings), got {size}':
            "size 4'ün bir katı olmalıdır (iki 2x2 pooling), gelen: {size}",
        '{name} must be 0, 1, 2 or 3, got {value!r}':
            '{name} 0, 1, 2 ya da 3 olmalıdır, gelen: {value!r}',
        "torch_version must look like '2.9.0', got {torch_version!r}":
            "torch_version '2.9.0' biçiminde olmalıdır, gelen: {torch_version!r}",
        '{wait_env} must be a whole number of milliseconds, got {value!r}':
            '{wait_env} tam sayı milisaniye olmalıdır, gelen: {value!r}',
        '{name} must be a boolean (1/0, true/false, yes/no), got {value!r}':
            '{name} bir boolean olmalıdır (1/0, true/false, yes/no), gelen: {value!r}',
        'no rows: no replica':
            'satır yok: kopya yok',
        'sample index in the batch':
            'örneğin yığındaki sırası',
        'batch of {batch_size} over {n_devices} devices: {sizes}':
            '{batch_size} örneklik yığın, {n_devices} cihaza: {sizes}',
        'memory per device':
            'cihaz başına bellek',
        "share of the step's time":
            'adımın süresindeki pay',
        'max {largest}, eps {eps}':
            'en büyük {largest}, eps {eps}',
        'log2 of the magnitude (light: subnormals, dark: normal numbers)':
            "büyüklüğün log2'si (açık: alt normal sayılar, koyu: normal sayılar)",
        'loss scale':
            'kayıp ölçeği',
        'step skipped (inf/nan)':
            'atlanan adım (inf/nan)',
        'scale':
            'ölçek',
        "{name} is the grader's reference: the hidden tests refuse it to an answer (write the exercise's code yourself)":
            '{name} notlandırıcının referansıdır: gizli testler onu bir cevaba kapatır (alıştırmanın kodunu kendiniz yazınız)',
        "note: {name} is one of the grader's references. It runs here, but the hidden tests refuse it to an answer (this cell is not one of the lesson's own cells as released): an exercise whose answer calls it scores nothing. Write that code yourself.":
            'not: {name}, notlandırıcının referans uygulamalarından biridir. Burada çalışır, ama gizli testler onu bir cevaba kullandırmaz (bu hücre, dersin yayımlandığı hâliyle kendi hücrelerinden biri değil): cevabı onu çağıran bir alıştırma hiç puan almaz. O kodu kendiniz yazınız.',
        'notebook must be a path, got {kind}':
            'notebook bir yol olmalıdır, gelen: {kind}',
        'The self-check needs a checkout of the course, with its grader: download this notebook (File > Download), then in a clone of the course run `make check NOTEBOOK=<the file>`.':
            'Öz denetim, kursun notlandırıcısıyla birlikte bir kopyasını (checkout) ister: bu not defterini indiriniz (File > Download), sonra kursun bir klonunda `make check NOTEBOOK=<dosya>` çalıştırınız.',
        "Which notebook? Save it, then call selfcheck.check('<its path>').":
            "Hangi not defteri? Kaydediniz, sonra selfcheck.check('<yolu>') çağırınız.",
        'grading {path} as last saved (save first if you changed it): a minute or two...':
            '{path} son kaydedildiği hâliyle notlandırılıyor (değiştirdiyseniz önce kaydediniz): bir iki dakika...',
        'one result per rank ({world_size})':
            'her rank için bir sonuç ({world_size})',
        'the collected results are incomplete':
            'toplanan sonuçlar eksik',
        "rank {rank}'s weights are not those of plain Adam on the global batches: are the gradients averaged, the right slice stepped, every slice gathered?":
            "rank {rank}: ağırlıklar, global yığınlarda düz Adam'ın ağırlıkları değil: gradyanların ortalaması alınıyor mu, doğru dilim adımlanıyor mu, her dilim toplanıyor mu?",
        "rank {rank}'s shard does not hold its slice of the trained weights: step the shard you are given":
            'rank {rank}: parça, eğitilmiş ağırlıkların kendi dilimini tutmuyor: size verilen parçayı adımlayınız',
        "rank {rank}'s optimizer holds no Adam state for its shard: step the optimizer you are given":
            "rank {rank}: optimizer kendi parçası için Adam durumu tutmuyor: size verilen optimizer'ı adımlayınız",
        "rank {rank}'s Adam state ({key}) is not plain Adam's for its slice: step the optimizer you are given":
            "rank {rank}: Adam durumu ({key}), kendi dilimi için düz Adam'ınki değil: size verilen optimizer'ı adımlayınız",
        'these modules are not FSDP units: {names}: fully_shard every block, then the model':
            'şu modüller FSDP birimi değil: {names}: önce her bloğa, sonra modele fully_shard uygulayınız',
        'the model':
            'model',
        "rank {rank}'s parameters are not all DTensors: {kinds}":
            'rank {rank}: parametrelerin hepsi DTensor değil: {kinds}',
        "rank {rank}'s shards are not its rows of the trained model: did it train cfg.steps steps of Adam on its own batches?":
            'rank {rank}: parçalar, eğitilmiş modelin kendi satırları değil: kendi yığınlarında cfg.steps adım Adam ile eğitti mi?',
        'only rank 0 gathers the full weights':
            'tam ağırlıkları yalnızca rank 0 toplar',
        'the trained weights are not those of plain Adam on the global batches':
            "eğitilmiş ağırlıklar, global yığınlarda düz Adam'ın ağırlıkları değil",
        'shape must be a non-empty tuple of ints >= 0, got {shape!r}':
            "shape >= 0 int'lerden oluşan boş olmayan bir tuple olmalıdır, gelen: {shape!r}",
        'tensor must be a torch.Tensor with at least one dimension, got {kind}':
            'tensor en az bir boyutu olan bir torch.Tensor olmalıdır, gelen: {kind}',
        'shards must be a non-empty list of dicts, one per rank':
            "shards, rank başına bir tane olmak üzere dict'lerden oluşan boş olmayan bir liste olmalıdır",
        'stage must be an int, got {stage!r}':
            'stage bir int olmalıdır, gelen: {stage!r}',
        'step must be an int in [0, {steps}), got {step!r}':
            'step [0, {steps}) aralığında bir int olmalıdır, gelen: {step!r}',
        'my_fsdp_worker returned a {kind}, not the model':
            'my_fsdp_worker modeli değil, bir {kind} döndürdü',
        '{env} must be one of {settings}, got {value!r}':
            '{env} şunlardan biri olmalıdır: {settings}, gelen: {value!r}',
        'TPU device files {files}':
            'TPU aygıt dosyaları {files}',
        'version must look like 2.11.0, got {version!r}':
            'version 2.11.0 biçiminde olmalıdır, gelen: {version!r}',
        'TorchTPU needs Python{needs}, and this runtime has Python {python}: TorchTPU cannot run here.':
            'TorchTPU, Python{needs} ister; bu çalışma ortamında Python {python} var: TorchTPU burada çalışamaz.',
        'torch_tpu {version} is installed, but it':
            'torch_tpu {version} kurulu, ama o',
        "{who} needs torch{needs}, and this runtime has torch {torch}: TorchTPU cannot run with this torch (installing {name} would replace it; the kernel's torch stays as it is).":
            "{who} torch{needs} ister; bu çalışma ortamında torch {torch} var: TorchTPU bu torch ile çalışamaz ({name} kurmak onu değiştirirdi; çekirdeğin torch'u olduğu gibi kalır).",
        'torch_tpu is not installed. TorchTPU {version} supports this runtime\'s torch {torch}: install it, keeping this torch, with\n    pip install "{name}=={version}" "torch=={public}"\nthen restart the kernel and run the lesson again.':
            'torch_tpu kurulu değil. TorchTPU {version}, bu çalışma ortamının torch {torch} sürümünü destekler: bu torch\'u koruyarak şununla kurunuz:\n    pip install "{name}=={version}" "torch=={public}"\nsonra çekirdeği yeniden başlatınız ve dersi yeniden çalıştırınız.',
        'torch_tpu {version} needs libtpu{needs}, and this runtime has {libtpu}: pip install "libtpu{needs}", then restart the kernel.':
            'torch_tpu {version}, libtpu{needs} ister; bu çalışma ortamında {libtpu} var: pip install "libtpu{needs}" çalıştırınız, sonra çekirdeği yeniden başlatınız.',
        'no libtpu':
            'libtpu yok',
        'torch_xla is installed: Part B runs on XLA:CPU':
            'torch_xla kurulu: B bölümü XLA:CPU üzerinde çalışır',
        'torch_xla is not installed either: Part B says so where it cannot run':
            'torch_xla da kurulu değil: B bölümü çalışamadığı yerde bunu söyler',
        'No TPU here (none on the PCI bus, no /dev/accel* or /dev/vfio device): TorchTPU needs one, so its step is skipped. {part_b}.':
            'Burada TPU yok (PCI veri yolunda yok, /dev/accel* ya da /dev/vfio aygıtı yok): TorchTPU bir TPU ister, bu yüzden onun adımı atlanır. {part_b}.',
        '{tpu}, torch_tpu {version} with torch {torch} and libtpu {libtpu}: the TorchTPU step runs on device "tpu".':
            '{tpu}, torch {torch} ve libtpu {libtpu} ile torch_tpu {version}: TorchTPU adımı "tpu" cihazında çalışır.',
        '{tpu}: {problem} The TPU runs Part B through torch_xla {xla}.':
            '{tpu}: {problem} TPU, B bölümünü torch_xla {xla} üzerinden çalıştırır.',
        '{tpu}: {problem} torch_xla is not installed either.':
            '{tpu}: {problem} torch_xla da kurulu değil.',
        'torch did not load torch_tpu\'s "tpu" device in this process (torch_tpu registers it on import only where it finds a TPU)':
            'torch bu süreçte torch_tpu\'nun "tpu" cihazını yüklemedi (torch_tpu onu içe aktarılırken yalnızca bir TPU bulduğu yerde kaydeder)',
        'batch_sizes must be a non-empty list of positive ints, got {batch_sizes!r}':
            "batch_sizes pozitif int'lerden oluşan boş olmayan bir liste olmalıdır, gelen: {batch_sizes!r}",
        'scaler must be a torch.amp.GradScaler, got {kind}':
            'scaler bir torch.amp.GradScaler olmalıdır, gelen: {kind}',
        'training':
            'eğitim',
        "Part B needs a torch_xla of the same minor as torch, and torch_xla exists for torch {oldest} to {newest} on Linux x86-64 only (its last release is {newest}.0): it runs in the course's own environment (`make lab`: torch 2.9 + torch_xla 2.9), on Kaggle's TPU runtime (torch 2.8 + torch_xla 2.8), on Colab's TPU runtime if its image still brings a torch_xla (not checked since 2025) and on a Linux x86-64 machine with torch {oldest} to {newest}; not on Colab's and Kaggle's CPU and GPU runtimes (torch 2.10), nor on macOS or Windows.":
            "B Bölümü, torch ile aynı ara sürümden (minor) bir torch_xla gerektirir ve torch_xla yalnızca Linux x86-64 için, torch {oldest} ile {newest} arası için vardır (son sürümü {newest}.0): kursun kendi ortamında (`make lab`: torch 2.9 + torch_xla 2.9), Kaggle'ın TPU çalışma ortamında (torch 2.8 + torch_xla 2.8), imajı hâlâ bir torch_xla getiriyorsa Colab'ın TPU çalışma ortamında (2025'ten beri denetlenmedi) ve torch {oldest} ile {newest} arası kurulu bir Linux x86-64 makinede çalışır; Colab'ın ve Kaggle'ın CPU ve GPU çalışma ortamlarında (torch 2.10), macOS'ta ya da Windows'ta çalışmaz.",
        "lesson 5 trains with FSDP2 on CPU processes (gloo) here, which needs torch {needed} or newer, and this runtime has torch {version}: before 2.9 gloo's reduce_scatter returns the sum where FSDP2 asks for the average, so every gradient would be {world} times too large, silently (pytorch/pytorch#162338). Open the lesson on a runtime with torch {needed} or newer (Colab's and Kaggle's CPU and GPU runtimes have 2.10; `make lab` brings 2.9), or on GPUs.":
            "5. ders burada FSDP2 ile CPU süreçlerinde (gloo) eğitir; bunun için torch {needed} ya da daha yenisi gerekir ve bu çalışma ortamında torch {version} var: 2.9'dan önce gloo'nun reduce_scatter'ı, FSDP2 ortalama istediğinde toplamı döndürür; böylece her gradyan sessizce {world} kat büyük çıkar (pytorch/pytorch#162338). Dersi torch {needed} ya da daha yenisi olan bir çalışma ortamında açınız (Colab'ın ve Kaggle'ın CPU ve GPU çalışma ortamlarında 2.10 vardır; `make lab` 2.9 getirir) ya da GPU'larda çalıştırınız.",
        'not a version: {version!r}':
            'bir sürüm değil: {version!r}',
        'This runtime has torch {version}, older than the course supports (torch {low} to {high}): some cells may fail. Use a newer runtime, or pip install "{requirement}" and restart the kernel.':
            'Bu çalışma ortamında torch {version} var; kursun desteklediğinden (torch {low} - {high}) eski: bazı hücreler başarısız olabilir. Daha yeni bir çalışma ortamı kullanınız ya da pip install "{requirement}" çalıştırıp çekirdeği yeniden başlatınız.',
        'This runtime has torch {version}, newer than the newest the course is tested with (torch {low} to {high}): it should work; if a cell fails, please report it with the output of `python -m helpers.hw_check`.':
            'Bu çalışma ortamında torch {version} var; kursun test edildiği en yeni sürümden (torch {low} - {high}) daha yeni: çalışması beklenir; bir hücre başarısız olursa lütfen `python -m helpers.hw_check` çıktısıyla bildiriniz.',
        'torch_xla {xla} does not match torch {version} (torch_xla X.Y runs with torch X.Y only): the XLA cells will fail. {hint}':
            'torch_xla {xla}, torch {version} ile uyuşmuyor (torch_xla X.Y yalnızca torch X.Y ile çalışır): XLA hücreleri başarısız olacak. {hint}',
        'torch_xla has wheels for Linux x86-64 only, not {machine}':
            "torch_xla'nın wheel paketleri yalnızca Linux x86-64 için var, {machine} için yok",
        "torch_xla has no wheel for torch {wanted} (it exists for torch {low} to {high}, matching torch's minor)":
            "torch {wanted} için torch_xla wheel paketi yok (torch {low} - {high} için, torch'un ara sürümüne uyan paketler var)",
        'torch_xla {wanted} has wheels for Python {oldest} to {newest}, not {python}':
            'torch_xla {wanted} wheel paketleri Python {oldest} - {newest} için var, {python} için yok',
        'Install the matching one: pip install "{requirement}"':
            'Uyan sürümü kurunuz: pip install "{requirement}"',
        'torch is not installed in this Python ({python}): install it (torch {oldest} to {newest}), then run this cell again.':
            "torch bu Python'da ({python}) kurulu değil: kurunuz (torch {oldest} ile {newest} arası), sonra bu hücreyi yeniden çalıştırınız.",
        'torch_xla is not installed, and {why_not}: part B (XLA) will say it cannot run here; the rest runs.':
            'torch_xla kurulu değil ve {why_not}: B bölümü (XLA) burada çalışamayacağını söyleyecek; geri kalanı çalışır.',
        'torch_xla is not installed. Part B (XLA) needs it: set INSTALL_TORCH_XLA = True in this cell and run it again, or run\n    pip install "{requirement}"\n(it matches this runtime\'s torch {version}, which stays as it is).':
            'torch_xla kurulu değil. B bölümü (XLA) ona ihtiyaç duyar: bu hücrede INSTALL_TORCH_XLA = True yapıp hücreyi yeniden çalıştırınız ya da şunu çalıştırınız:\n    pip install "{requirement}"\n(bu çalışma ortamının torch {version} sürümüne uyar; o sürüm olduğu gibi kalır).',
        'installing {requirement} (matching torch {version}) ...':
            '{requirement} kuruluyor (torch {version} ile uyumlu) ...',
        'failed:':
            'başarısız oldu:',
        'the course needs WSL2 (Linux on Windows) here: install it in PowerShell run as administrator with `wsl --install`, restart the computer, open Ubuntu and set the course up there as on Linux (`make lab`); or open the lesson on Colab or Kaggle.':
            "kurs burada WSL2 (Windows üzerinde Linux) gerektirir: yönetici olarak çalıştırılan PowerShell'de `wsl --install` ile kurunuz, bilgisayarı yeniden başlatınız, Ubuntu'yu açınız ve kursu orada Linux'taki gibi kurunuz (`make lab`); ya da dersi Colab'da veya Kaggle'da açınız.",
        '{what} cannot run on native Windows: {why}':
            "{what} yerel (native) Windows'ta çalışamaz: {why}",
        "torch_xla is not installed here: part B (XLA) of lesson 4 cannot run; everything else still runs. {where} Where a torch_xla matching this runtime's torch exists, set INSTALL_TORCH_XLA = True in the lesson's setup cell (its first code cell), then run that cell and the ones after it again: it installs that torch_xla, or says why none fits. torch_xla cannot run on macOS or Windows at all: it has wheels for Linux x86-64 only, for torch {oldest} to {newest}.":
            "torch_xla burada kurulu değil: 4. dersin B Bölümü (XLA) çalışamaz; geri kalan her şey yine çalışır. {where} Bu çalışma ortamının torch'una uyan bir torch_xla varsa, dersin kurulum hücresinde (ilk kod hücresi) INSTALL_TORCH_XLA = True yapınız, sonra o hücreyi ve ondan sonrakileri yeniden çalıştırınız: o torch_xla'yı kurar ya da neden hiçbirinin uymadığını söyler. torch_xla macOS'ta ve Windows'ta hiç çalışamaz: yalnızca Linux x86-64 için, torch {oldest} ile {newest} arası için wheel'leri vardır.",
        "experiments must be a list of dicts of count_compiles' arguments, without features; got {experiments!r}":
            "experiments, count_compiles'ın argümanlarından (features olmadan) oluşan dict'lerin bir listesi olmalıdır; gelen: {experiments!r}",
        'meshes must be a non-empty list of (shape, axis_names) of equal lengths, got {meshes!r}':
            'meshes, eşit uzunlukta (shape, axis_names) çiftlerinden oluşan boş olmayan bir liste olmalıdır, gelen: {meshes!r}',
        'shard must be callable or None, got {kind}':
            'shard çağrılabilir ya da None olmalıdır, gelen: {kind}',
    },
}
